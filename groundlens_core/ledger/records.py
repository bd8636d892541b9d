"""Decision records and their bytes: what one scored step or row becomes in a ledger.

A record holds what was decided (method, band, scores, the explanation's reason, embedder
fingerprint, package version, time) and SHA-256 hashes of the question, context and response (the
texts themselves only when asked for). Its canonical bytes (sorted keys, no whitespace, UTF-8) are
what is signed and hashed into the chain.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from groundlens_core._version import __version__
from groundlens_core.batch.outputs import mode_kind
from groundlens_core.errors import GroundlensInputError
from groundlens_core.scoring.decision import Decision
from groundlens_core.scoring.results import FactFinding

FORMAT = "groundlens-ledger/1"
#: what the first record of a ledger names as the record before it
GENESIS = "0" * 64


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN: the bytes that are signed and hashed."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8", "surrogatepass"
    )


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_sha256(value: Any) -> str | None:
    """SHA-256 of a text as UTF-8; a list of context pieces is hashed as its pieces joined with a
    blank line (``"\\n\\n"``); None stays None. So anyone holding the texts can check a record."""
    if value is None:
        return None
    return sha256_hex(_as_text(value).encode("utf-8", "surrogatepass"))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n\n".join(_as_text(getattr(v, "text", v)) for v in value)
    return str(value)


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _number(value: Any) -> float | None:
    """A score as JSON can hold it (NaN and infinities are not JSON: None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def decision_record(
    *,
    method: str,
    band: str,
    question: Any = None,
    context: Any = None,
    response: Any = None,
    result: Any = None,
    reason: str | None = None,
    step_id: str | None = None,
    row: int | None = None,
    trace_id: str | None = None,
    node: str | None = None,
    fingerprint: str | None = None,
    include_text: bool = False,
) -> dict[str, Any]:
    """The body of one decision record (the writer adds id, chain link, time, key and signature).

    ``result`` is a core result object, its dict, or the ``groundlens_*`` cells of a row. ``reason``
    is why: by default only its category, with none of the caller's text (the decision's rule, e.g.
    "a specific fact is not supported by the source" without the fact or the source's value; an
    error's exception type); with ``include_text`` the explanation with quoted sentences taken
    out, or the error's message.
    """
    values = _score_values(result)
    explained = values.pop("reason", None)
    decision = values.pop("decision", None)
    if reason is None:
        reason = explained
    if method == "error":
        reason = reason if include_text else error_category(reason)
    elif not include_text:  # the decision's rule, rendered without the caller's values
        reason = None if decision is None else decision.render(values=False)
    rec: dict[str, Any] = {
        "type": "decision",
        "step_id": step_id,
        "row": row,
        "trace_id": trace_id,
        "node": node,
        "method": method,
        "band": band,
        "scores": {k: values.get(k) for k in ("value", "normalized", "score", "support")},
        "rule": None if decision is None else decision.rule,
        "reason": reason,
        "fingerprint": values.get("fingerprint") or fingerprint,
        "version": __version__,
        "sha256": {
            "question": text_sha256(question),
            "context": text_sha256(context),
            "response": text_sha256(response),
        },
    }
    if include_text:
        rec["text"] = {
            "question": None if question is None else _as_text(question),
            "context": None if context is None else _as_text(context),
            "response": None if response is None else _as_text(response),
        }
    return rec


_ERROR_TYPE = re.compile(r"([A-Z][A-Za-z0-9_]*(?:Error|Exception|Interrupt|Exit|Timeout)):")


def error_category(message: str | None) -> str | None:
    """An error's exception type (``ValueError``) when its message names one, else ``"error"``:
    never the message, which can quote the input."""
    if message is None:
        return None
    m = _ERROR_TYPE.match(str(message))
    return m.group(1) if m else "error"


def _score_values(score: Any) -> dict[str, Any]:
    """value, normalized, score, support, fingerprint, the decision and the explanation (quotes taken
    out) of a result object, its dict or a row's cells. A result object is read field by field: its
    ``to_dict()`` copies the whole evidence and would be most of the ledger's cost on the worker."""
    if score is None:
        return {}
    if isinstance(score, Mapping) and "groundlens_method" in score:  # a row's cells (all a Ray worker sends)
        return {
            "value": _number(score.get("groundlens_value")),
            "normalized": _number(score.get("groundlens_normalized")),
            "score": _number(score.get("groundlens_score", score.get("groundlens_rank"))),
            "support": _number(score.get("groundlens_support")),
            "reason": score.get("groundlens_error") or None,
        }
    get = score.get if isinstance(score, Mapping) else lambda name: getattr(score, name, None)
    support = get("support")
    evidence = get("evidence")
    if support is None and evidence is not None:  # a support score: its value is the support
        support = evidence.get("support") if isinstance(evidence, Mapping) else getattr(evidence, "support", None)
    decision = get("decision")
    if isinstance(decision, Mapping):
        decision = Decision.from_dict(decision, FactFinding)
    value = get("score")
    return {
        "value": _number(get("value")),
        "normalized": _number(get("normalized")),
        "score": _number(value if value is not None else get("rank")),
        "support": _number(support),
        "fingerprint": get("fingerprint"),
        "decision": decision,
        "reason": _reason(get("explanation"), evidence) if get("explanation") is not None else get("error"),
    }


def _reason(explanation: Any, evidence: Any) -> str | None:
    """The explanation without the caller's text: a quoted response sentence becomes ``"[redacted]"``."""
    if not isinstance(explanation, str):
        return None
    from groundlens_core.scoring.results import REDACTED, quote_sentence

    sentences = evidence.get("sentences", ()) if isinstance(evidence, Mapping) else getattr(evidence, "sentences", ())
    for s in sentences or ():
        text = s.get("text") if isinstance(s, Mapping) else getattr(s, "text", None)
        if isinstance(text, str) and text:
            explanation = explanation.replace(f'"{quote_sentence(text)}"', f'"{REDACTED}"')
    return explanation


def crash_cut(piece: bytes) -> bool:
    """A proper start of a record line (what a writer stopped mid-line leaves): an opening brace,
    and not JSON on its own."""
    from groundlens_core.batch.json_input import too_deep

    if not piece.startswith(b"{") or too_deep(piece):  # a record nests three levels, never hundreds
        return False
    try:
        json.loads(piece)
    except Exception:
        return True
    return False


def _not_regular(path: Path, mode: int) -> GroundlensInputError | None:
    """The one-line error for a ledger that is a FIFO, a device or a directory (a read would hang)."""

    kind = mode_kind(mode)
    return (
        None if kind is None else GroundlensInputError(f"the ledger {path} is {kind}; give the name of a regular file")
    )
