"""Exceptions with one-line messages: the CLI prints them without a traceback (:func:`printable`)."""

import re


class GroundlensError(Exception):
    """Base class of every error groundlens raises on purpose."""


class GroundlensInputError(GroundlensError, ValueError):
    """The caller passed something we cannot score (blank text, missing column, bad file)."""


class ModelNotFoundError(GroundlensError):
    """No embedding model could be resolved without the network."""


class CalibrationMismatchError(GroundlensError):
    """A DGI direction was built by a different embedder than the one scoring now."""


class EmbeddingError(GroundlensError):
    """The embedder returned something unusable (wrong shape, NaN or infinite values)."""


def describe_exception(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"``: how an error step, a log line or a trace end names a failure."""
    return f"{type(exc).__name__}: {exc}"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) shown as an escape (``\\x1b``, ``\\n``):
    a message echoes paths and values from the user's files, and a raw escape sequence or line
    break in one would rewrite the terminal or split the message's one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
