"""Exceptions with one-line messages: the CLI prints them as they are, without a traceback."""


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
