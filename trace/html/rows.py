"""What one row of the HTML report shows: its score, reason, tokens, facts, evidence and the steps
that produced its context. Plain data for the template and the page's script; no HTML here."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from groundlens_core.scoring.bands import BAND_COLOURS, SCORED_METHODS
from groundlens_core.trace.model import Step, Trace
from groundlens_core.trace.otel.finding_spans import failed_findings

PREVIEW_CHARS = 140
PRODUCER_WINDOW = 32  # earlier steps searched for a context piece's producer by containment

# facts shown in a row's details, in this order, when the score dict has them
_SCORE_FACTS = (
    ("value", "raw score"),
    ("normalized", "normalized"),
    ("support", "support"),
    ("score", "score"),
    ("d_response_question", "d(response, question)"),
    ("d_response_context", "d(response, context)"),
    ("context_mode", "context mode"),
    ("context_chunks", "context chunks"),
    ("displacement_norm", "|response - question|"),
    ("direction", "DGI direction"),
    ("backend", "embedding backend"),
    ("fingerprint", "embedder"),
    ("version", "scored by"),
)


def _num(value: Any) -> float | None:
    """A finite float or None: hand-built score dicts may hold anything."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _fmt_num(value: Any, digits: int = 2) -> str:
    f = _num(value)
    return "" if f is None else f"{f:.{digits}f}"


def shown_score(step: Step) -> float | None:
    """The score a row shows: the risk value it is ranked by (never normalized SGI/DGI)."""
    return _num(step.score) if step.method in SCORED_METHODS else None


def _band_css() -> str:
    """The band colours (``groundlens_core.scoring.bands.BAND_COLOURS``) as the CSS variables the styles use."""
    return ":root {" + " ".join(f"--{b}: {fg}; --{b}-bg: {bg};" for b, (fg, bg) in BAND_COLOURS.items()) + "}\n"


def _text_note(value: Any) -> str:
    """How a text field was shrunk, for a badge: ``redacted`` / ``cut: 1,234 chars in all``."""
    if isinstance(value, Mapping):
        if value.get("redacted"):
            return "redacted"
        if value.get("truncated"):
            return f"cut: {int(value.get('length') or 0):,} chars in all"
    return ""


def _preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _fmt_time(value: str | None) -> str:
    ts = _parse_time(value)
    if ts is None:
        return str(value or "")
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc)
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(start: str | None, end: str | None) -> str:
    a, b = _parse_time(start), _parse_time(end)
    if a is None or b is None:
        return ""
    try:
        secs = (b - a).total_seconds()
    except TypeError:  # naive vs aware
        return ""
    return f"{secs * 1000:.0f} ms" if secs < 1 else f"{secs:.1f} s"


def _fmt_ms(value: Any) -> str:
    f = _num(value)
    if f is None:
        return ""
    return f"{f:.0f}" if f >= 10 else f"{f:.1f}"


def _evidence(step: Step) -> list[list[Any]]:
    """Each response sentence for the report: ``[start, end, support, similarity, passage,
    [[start, end], ...] of unsupported tokens, is_weakest, piece]``, offsets into the response as
    shown, ``piece`` the index in the step's context of the piece the passage lies in (None when the
    score does not say, or names no piece of this context). Empty when the response is not shown
    whole (redacted or cut): offsets would point nowhere."""
    ev = getattr(step.result, "evidence", None)
    if ev is None or not isinstance(step.response, str):
        return []
    n = len(step.response)
    pieces = len(step.context)
    return [
        [
            s.start,
            s.end,
            round(s.support, 4),
            round(s.similarity, 4),
            s.passage,
            [[u.start, u.end] for u in s.unsupported if u.end <= n],
            i == ev.weakest,
            s.passage_piece if _is_index(s.passage_piece, pieces) else None,
        ]
        for i, s in enumerate(ev.sentences)
        if s.end <= n
    ]


def _is_index(value: Any, n: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n


def _finding_marks(step: Step) -> list[list[Any]]:
    """Each failed finding of the response for the report to mark: ``[start, end, status, title]``,
    offsets into the response as shown, ``title`` what the source says (``at most 60 days — the
    source says at most 30 days``). The findings are those the exports carry (:func:`finding_spans.failed_findings`).
    Empty when the response is not shown whole (redacted or cut): offsets would point nowhere."""
    if step.result is None or not isinstance(step.response, str):
        return []
    n = len(step.response)
    return [[f.start, f.end, f.status, f.describe()] for f in failed_findings(step.result) if 0 <= f.start < f.end <= n]


def _reason(step: Step) -> str:
    """Why the row has its band, in a few words, rendered from the step's decision: the first failed
    fact and what the source says, else the decision's reason; the error or why it was skipped; for
    a score saved without a decision (an older version), its first failed fact, else the start of its
    explanation."""
    if step.method == "error":
        return str(step.error or "error")
    if step.method == "skipped":
        return str(step.skip_reason or "not scored")
    decision = step.decision
    if decision is None:  # a score saved by an older version: its failed facts, else its explanation
        ev = getattr(step.result, "evidence", None)
        failed = tuple(ev.failed_facts()) if ev is not None else ()
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"fact: {failed[0].describe()}{more}" if failed else _preview(str(step.explanation or ""), 160)
    failed = decision.findings
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    if decision.rule == "facts" and failed:
        return f"fact: {failed[0].describe()}{more}"
    if failed:  # grounded in a flagged output: say where, and the origin's first failed fact
        head = decision.render(values=False)
        return _preview(f"{head}: {failed[0].describe()}{more}", 160)
    return _preview(decision.reason, 160)


def _tokens(step: Step) -> str:
    u = step.usage
    if u is None:
        return ""
    if u.input_tokens is not None or u.output_tokens is not None:
        return "/".join("-" if n is None else str(n) for n in (u.input_tokens, u.output_tokens))
    return "" if u.total_tokens is None else str(u.total_tokens)


def _producers(steps: Sequence[Step]) -> dict[str, list[Any]]:
    """For each step id, per context piece, the id of the step of the trace that produced it, or None.

    A piece's recorded ``producer`` decides when it names another step of this trace: the adapter
    saw which step the piece came from, however the text was since reworded or cut. Only a piece
    without one (a file from an older version, a source that does not know) is matched by its text,
    to an earlier step whose response is the piece or is found in it: exact matches by a dict,
    containment among the last few steps before it only, so a big trace stays linear."""
    from groundlens_core.trace.lineage import (
        MIN_CHARS,
        folded,  # the cascade's normalisation
    )

    def norm(t: Any) -> str:
        return folded(t) if isinstance(t, str) else ""

    ids = {str(s.id) for s in steps}
    exact: dict[str, str] = {}
    recent: list[tuple[str, str]] = []
    out: dict[str, list[Any]] = {}
    for step in sorted(steps, key=lambda s: s.index):
        links: list[Any] = []
        for piece in step.context:
            recorded = piece.producer
            if isinstance(recorded, str) and recorded in ids and recorded != str(step.id):
                links.append(recorded)
                continue
            text = norm(piece.text)
            found = exact.get(text) if text else None
            if found is None and len(text) >= MIN_CHARS:
                found = next((sid for r, sid in reversed(recent) if r in text), None)
            links.append(found)
        if any(links):
            out[step.id] = links
        # what a step hands on: its response; a tool or retriever step's result may sit in its context
        outputs = [norm(step.response)]
        if step.kind in ("tool", "retrieval"):
            outputs += [norm(p.text) for p in step.context]
        for out_text in outputs:
            if len(out_text) >= MIN_CHARS or (out_text and step.kind in ("tool", "retrieval")):
                exact.setdefault(out_text, step.id)
                recent.append((out_text, step.id))
        del recent[:-PRODUCER_WINDOW]
    return out


def detail_pairs(step: Step, trace: Trace) -> list[list[str]]:
    """(label, value) pairs for a row's details: score internals, model, timings, ids. The embedder
    and version are listed only where they differ from the trace's (the header shows those)."""
    out: list[list[str]] = [["method", step.method], ["kind", step.kind], ["step", f"#{step.index}"]]
    same = {"fingerprint": trace.fingerprint, "version": trace.package_version}
    for key, label in _SCORE_FACTS:
        v = getattr(step.result, key, None)
        if v is None or (key in same and v == same[key]):
            continue
        out.append([label, str(v) if isinstance(v, (int, str)) or _num(v) is None else f"{v:.4f}"])
    if step.model:
        out.append(["model", str(step.model)])
    if step.provider:
        out.append(["provider", str(step.provider)])
    usage = step.usage.to_dict() if step.usage is not None else {}
    if any(usage.get(k) is not None for k in ("input_tokens", "output_tokens", "total_tokens")):
        out.append(
            [
                "tokens (in / out / total)",
                " / ".join(
                    "-" if usage.get(k) is None else str(usage.get(k))
                    for k in ("input_tokens", "output_tokens", "total_tokens")
                ),
            ]
        )
    if _num(step.llm_latency_ms) is not None:
        out.append(["LLM latency", f"{_fmt_ms(step.llm_latency_ms)} ms"])
    if _num(step.scoring_latency_ms) is not None:
        out.append(["scoring latency", f"{_fmt_ms(step.scoring_latency_ms)} ms"])
    if step.started_at:
        out.append(["started", str(step.started_at)])
    if step.ended_at:
        out.append(["ended", str(step.ended_at)])
    out.append(["step id", str(step.id)])
    if step.parent_id:
        out.append(["parent id", str(step.parent_id)])
    return out
