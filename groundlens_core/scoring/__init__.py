"""SGI, DGI, support and ``evaluate``: the method, on top of any :class:`Embedder`.

SGI = d(phi(r), phi(q)) / d(phi(r), phi(ctx)) with Euclidean d on unit embeddings; DGI = cos of the
unit displacement phi(r) - phi(q) with a direction mu_hat. All arithmetic after the embedder is
float64 in a fixed order, so a result depends only on the embeddings, which are batch invariant.

Texts longer than the model window (256 word pieces) are never truncated: they are split into
pieces. A long question or response is the normalised mean of its pieces; a long context is formed
per ``long_context``: ``"mean"`` (normalised mean of the pieces) or ``"nearest"`` (the piece nearest
the response).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from groundlens_core import settings
from groundlens_core._version import __version__
from groundlens_core.embedding.plan import embed_with_spans, get_default_embedder
from groundlens_core.embedding.plan import text_pieces as _pieces
from groundlens_core.embedding.plan import unit as _unit
from groundlens_core.errors import GroundlensError, GroundlensInputError, describe_exception
from groundlens_core.evidence.analysed import AnalysedText, analyse
from groundlens_core.evidence.passages import (
    EvidencePlan,
    build_evidence,
    context_keys,
    locate_passages,
    plan_context_facts,
    plan_evidence,
)
from groundlens_core.scoring.bands import (
    EPSILON,
    SGI_DEGENERATE_HIGH,
    TRIAGE_NOTE,
    explain,
    explain_support,
    normalize,
    triage,
)
from groundlens_core.scoring.calibration import CalibrationResult, calibration_from_csv, resolve_calibration
from groundlens_core.scoring.decision import (
    Decision,
    Upstream,
    decide_dgi,
    decide_sgi,
    decide_support,
    decide_verified,
    opening,
)
from groundlens_core.scoring.results import (
    DGIResult,
    Evidence,
    GroundlensResult,
    ScoreError,
    SGIResult,
    SupportResult,
    Verdict,
    quote_sentence,
)
from groundlens_core.text import has_words, is_blank
from groundlens_core.verifier import get_verifier

LONG_CONTEXT_MODES = ("mean", "nearest")
DEFAULT_LONG_CONTEXT = "mean"
MAX_TEXT_CHARS = settings.whole_number("GROUNDLENS_MAX_CHARS", 200_000)

# ---------------------------------------------------------------- input checks


def _check_text(name: str, value: Any) -> str:
    if value is None:
        raise GroundlensInputError(f"{name} is missing")
    if not isinstance(value, str):
        raise GroundlensInputError(f"{name} must be text, got {type(value).__name__}")
    if is_blank(value):  # no letter, digit or symbol once invisible characters are removed
        raise GroundlensInputError(f"{name} is blank")
    if not has_words(value):
        raise GroundlensInputError(f"{name} has no letter or digit (only symbols or emoji): nothing to score")
    if len(value) > MAX_TEXT_CHARS:
        raise GroundlensInputError(
            f"{name} has {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,} (GROUNDLENS_MAX_CHARS)"
        )
    _check_encodable(name, value)
    return value


def _check_encodable(name: str, value: str) -> None:
    """Lone surrogates (a cut emoji in a JSON payload, undecodable bytes from a shell) are not text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise GroundlensInputError(
            f"{name} is not valid Unicode text (a lone surrogate at character {exc.start})"
        ) from None


#: where each context piece the caller gave lies in the joined context: (index in the caller's
#: list, start, end) of every piece kept, in order
PieceSpans = tuple[tuple[int, int, int], ...]


def join_context(context: Any) -> str | None:
    """The context as one text, or None when it is absent or blank (-> DGI).

    A list of pieces (documents, tool outputs) is joined with blank lines, blank pieces dropped.
    """
    return join_context_pieces(context)[0]


def join_context_pieces(context: Any) -> tuple[str | None, PieceSpans | None]:
    """:func:`join_context` and where each piece of a list lies in the joined text (None for a
    context given as one text). Why: a passage found in the joined text is traced back to the piece,
    and so to the tool or document, it came from. A None piece counts as blank, so a caller whose
    list holds a piece without text keeps its indexes."""
    if context is None:
        return None, None
    if isinstance(context, float) and math.isnan(context):
        return None, None
    if isinstance(context, str):
        pieces, given = [context], False
    elif isinstance(context, (list, tuple)):
        pieces, given = [], True
        for p in context:
            if p is not None and not isinstance(p, str):
                raise GroundlensInputError(f"context pieces must be text, got {type(p).__name__}")
            pieces.append(p or "")
    else:
        raise GroundlensInputError(f"context must be text or a list of texts, got {type(context).__name__}")
    # blank, or only symbols and emoji: nothing to read
    kept = [(i, p.strip()) for i, p in enumerate(pieces) if has_words(p)]
    if not kept:
        return None, None
    text = "\n\n".join(p for _, p in kept)
    _check_encodable("context", text)
    if len(text) > MAX_TEXT_CHARS:
        raise GroundlensInputError(
            f"context has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,} (GROUNDLENS_MAX_CHARS)"
        )
    spans, at = [], 0
    for i, p in kept:
        spans.append((i, at, at + len(p)))
        at += len(p) + 2
    return text, tuple(spans) if given else None


@dataclass
class _Item:
    question: str | None  # None: no question (or a blank one) -> scored against the context alone
    response: str
    context: str | None
    pieces: PieceSpans | None = None  # where the caller's context pieces lie in ``context``
    upstream: tuple[Upstream, ...] = ()  # the unverified outputs its context carries (see decision.py)


def _make_item(q: Any, r: Any, c: Any) -> _Item:
    """Check one item. A missing or blank question is fine with a context (method ``support``); without
    a context it is the usual one-line error, because DGI needs a real question."""
    response = _check_text("response", r)
    context, pieces = join_context_pieces(c)
    no_question = q is None or (isinstance(q, float) and math.isnan(q)) or (isinstance(q, str) and not has_words(q))
    if context is not None and no_question:
        return _Item(None, response, context, pieces)
    return _Item(_check_text("question", q), response, context, pieces)


def _prepare(item: Any) -> _Item:
    upstream = None
    if isinstance(item, Mapping):
        q, r, c = item.get("question"), item.get("response"), item.get("context")
        upstream = item.get("upstream")
    elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
        q, r = item[0], item[1]
        c = item[2] if len(item) == 3 else None
    else:
        raise GroundlensInputError(
            "each item must be a mapping with question/response[/context] or a (question, response[, context]) tuple"
        )
    return _with_upstream(_make_item(q, r, c), upstream)


def _with_upstream(item: _Item, upstream: Any) -> _Item:
    """``item`` with the unverified outputs its context carries, checked: a decision takes them as an
    input, so a wrong value is refused here rather than read as none."""
    if upstream is None or (isinstance(upstream, (list, tuple)) and not upstream):
        return item
    if not isinstance(upstream, (list, tuple)) or not all(isinstance(u, Upstream) for u in upstream):
        raise GroundlensInputError(f"upstream must be a list of Upstream, got {type(upstream).__name__}")
    return replace(item, upstream=tuple(upstream))


# ---------------------------------------------------------------- the math on vectors


def sgi_from_vectors(r: np.ndarray, q: np.ndarray, c: np.ndarray) -> tuple[float, float, float]:
    """(raw SGI, d(r,q), d(r,ctx)) with the method's two degenerate cases."""
    d_rq = float(np.linalg.norm(r - q))
    d_rc = float(np.linalg.norm(r - c))
    if d_rc < EPSILON:
        return SGI_DEGENERATE_HIGH, d_rq, d_rc
    if d_rq < EPSILON:
        return 0.0, d_rq, d_rc
    return d_rq / d_rc, d_rq, d_rc


def dgi_from_vectors(r: np.ndarray, q: np.ndarray, mu: np.ndarray) -> tuple[float, float]:
    """(raw DGI, ||phi(r) - phi(q)||); a response that embeds like its question scores 0."""
    disp = r - q
    norm = float(np.linalg.norm(disp))
    if norm < EPSILON:
        return 0.0, norm
    value = float(np.dot(disp / norm, mu))
    return max(-1.0, min(1.0, value)), norm


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def _same_point(response: str, other: str, what: str) -> str:
    """Say only what the numbers show: equal embeddings are 'restating' only when the texts are equal."""
    if _same_text(response, other):
        return f"The response restates {what}."
    return f"The response and {what} embed to the same point: the model cannot tell them apart."


def _weakest_text(ev: Evidence) -> str | None:
    s = ev.weakest_sentence
    return None if s is None else quote_sentence(s.text)


def _sgi_result(
    raw: float,
    d_rq: float,
    d_rc: float,
    mode: str,
    chunks: int,
    emb,
    item: _Item,
    ev: Evidence | None,
    checked: tuple[Verdict, Any] | None = None,
) -> SGIResult:
    sgi_band = triage("sgi", raw)
    detail = ""
    if raw == SGI_DEGENERATE_HIGH and d_rc < EPSILON:
        detail = _same_point(item.response, item.context or "", "its context")
    elif raw == 0.0 and d_rq < EPSILON:
        detail = _same_point(item.response, item.question or "", "the question")
    decision = _verified_decision(checked, ev, raw == 0.0 and d_rq < EPSILON, item.upstream) or decide_sgi(
        raw, ev, item.upstream
    )
    text = opening(decision) + " " + explain("sgi", raw, sgi_band, detail).removesuffix(f" ({TRIAGE_NOTE})")
    if ev is not None:
        text += " " + explain_support(ev.support, ev.content_tokens, ev.unsupported_tokens, _weakest_text(ev))
    return SGIResult(
        **_score_fields("sgi", raw, decision, f"{text} ({TRIAGE_NOTE})", emb, checked),
        d_response_question=d_rq,
        d_response_context=d_rc,
        context_mode=mode,
        context_chunks=chunks,
        support=None if ev is None else ev.support,
        evidence=ev,
    )


def _verified_decision(
    checked: tuple[Verdict, Any] | None,
    ev: Evidence | None,
    restates_question: bool = False,
    upstream: tuple[Upstream, ...] = (),
) -> Decision | None:
    """The band the verifier decides, when it read the response (else None: the rules decide)."""
    if checked is None:
        return None
    verdict, verifier = checked
    return decide_verified(
        verdict, ev, verifier.flag_below, verifier.trust_from, restates_question=restates_question, upstream=upstream
    )


def _dgi_result(raw: float, norm: float, cal: CalibrationResult, emb, item: _Item) -> DGIResult:
    band = triage("dgi", raw)
    detail = _same_point(item.response, item.question or "", "the question") if norm < EPSILON else ""
    decision = decide_dgi(raw, item.upstream)
    return DGIResult(
        **_score_fields("dgi", raw, decision, f"{opening(decision)} {explain('dgi', raw, band, detail)}", emb),
        displacement_norm=norm,
        direction=cal.direction_id,
    )


def _support_result(
    ev: Evidence, emb, checked: tuple[Verdict, Any] | None = None, upstream: tuple[Upstream, ...] = ()
) -> SupportResult:
    decision = _verified_decision(checked, ev, upstream=upstream) or decide_support(ev, upstream)
    text = explain_support(ev.support, ev.content_tokens, ev.unsupported_tokens, _weakest_text(ev))
    explanation = f"{opening(decision)} {text} No question: scored against the context alone. ({TRIAGE_NOTE})"
    return SupportResult(**_score_fields("support", ev.support, decision, explanation, emb, checked), evidence=ev)


def _score_fields(
    method: str, value: float, decision: Decision, explanation: str, emb, checked: tuple[Verdict, Any] | None = None
) -> dict[str, Any]:
    """The fields every result shares: the raw value, its triage decision, the embedder behind it
    and, when the verifier decided, its verdict (its weights are named in the fingerprint)."""
    verdict = None if checked is None else checked[0]
    fingerprint = emb.fingerprint if verdict is None else f"{emb.fingerprint}+{verdict.verifier}"
    return {
        "method": method,
        "value": value,
        "normalized": normalize(method, value),
        "flagged": decision.band == "flagged",
        "triage": decision.band,
        "explanation": explanation,
        "fingerprint": fingerprint,
        "backend": emb.backend,
        "version": __version__,
        "score": decision.score,
        "decision": decision,
        "verdict": verdict,
    }


def _verified(
    verifier: Any, emb, item: _Item, ev: Evidence | None
) -> tuple[tuple[Verdict, Any] | None, Evidence | None]:
    """The verifier's verdict on ``item`` and the evidence whose weakest sentence is the verifier's
    (None when the verifier trusts every sentence)."""
    if verifier is None or item.context is None:
        return None, ev
    verdict = verifier.verify(emb, item.question, item.response, [item.context])
    if ev is not None:
        weak = verdict.weakest_sentence
        index = None
        if weak is not None and weak.probability < verifier.trust_from:
            index = next(
                (
                    i
                    for i, s in enumerate(ev.sentences)
                    if s.start <= weak.start < s.end or weak.start <= s.start < weak.end
                ),
                None,
            )
        ev = replace(ev, weakest=index)
    return (verdict, verifier), ev


# ---------------------------------------------------------------- public API


def _evidence_plans(items: list[_Item], evidence: bool) -> tuple[dict[int, EvidencePlan], dict[str, AnalysedText]]:
    """The evidence plan of each item that has one (by its index), and the analysed texts behind
    them: each distinct response and context is split and tokenised once, and its sentences are
    shared by the word support, the facts and the claims of every item that has it."""
    plans: dict[int, EvidencePlan] = {}
    analysed: dict[str, AnalysedText] = {}
    for i, it in enumerate(items):
        if it.context is not None and (evidence or it.question is None):
            for text in (it.response, it.context):
                if text not in analysed:
                    analysed[text] = analyse(text)
            plans[i] = plan_evidence(analysed[it.response], analysed[it.context])
    return plans, analysed


def _score_items(
    items: list[_Item], emb, calibration, long_context: str, evidence: bool = True
) -> list[GroundlensResult]:
    if long_context not in LONG_CONTEXT_MODES:
        raise GroundlensInputError(f"long_context must be one of {', '.join(LONG_CONTEXT_MODES)}, got {long_context!r}")
    cal = resolve_calibration(calibration, emb.fingerprint) if any(it.context is None for it in items) else None
    verifier = get_verifier() if evidence and any(it.context is not None for it in items) else None
    # one plan for the whole batch: every distinct text (and context piece) is encoded once, in one
    # encode, and the evidence's sentences are pooled from the response's and context's own pass
    asked = [it for it in items if it.question is not None]
    ctx_plans = {it.context: _pieces(emb, it.context) for it in asked if it.context is not None}
    ev_plans, analysed = _evidence_plans(items, evidence)
    requests: dict[str, dict[tuple[int, int], None]] = {}
    for it in asked:
        requests.setdefault(it.question, {})  # type: ignore[arg-type]
        requests.setdefault(it.response, {})
    for plan in ctx_plans.values():
        for piece in plan:
            requests.setdefault(piece, {})
    for ev_plan in ev_plans.values():
        for text, spans in ev_plan.span_requests().items():
            requests.setdefault(text, {}).update(dict.fromkeys(spans))
    vecs, sent_vecs = embed_with_spans(emb, {t: list(sp) for t, sp in requests.items()})
    keys_of: dict[str, tuple] = {}
    out: list[GroundlensResult] = []
    for i, it in enumerate(items):
        ev = None
        if i in ev_plans:
            if it.context not in keys_of:  # once per distinct context
                keys_of[it.context] = (context_keys(analysed[it.context]), plan_context_facts(ev_plans[i]))  # type: ignore[index]
            ctx_keys, ctx_facts = keys_of[it.context]  # type: ignore[index]
            ev = locate_passages(
                build_evidence(ev_plans[i], sent_vecs, ctx_keys, ctx_facts, question=it.question), it.pieces
            )
        checked, ev = _verified(verifier, emb, it, ev)
        if it.question is None:
            out.append(_support_result(ev, emb, checked, it.upstream))  # type: ignore[arg-type]
            continue
        q, r = vecs[it.question], vecs[it.response]  # type: ignore[index]
        if it.context is None:
            raw, norm = dgi_from_vectors(r, q, cal.vector)  # type: ignore[union-attr]
            out.append(_dgi_result(raw, norm, cal, emb, it))  # type: ignore[arg-type]
            continue
        plan = ctx_plans[it.context]
        if len(plan) == 1:
            c, mode = vecs[plan[0]], "whole"
        elif long_context == "mean":
            c, mode = _unit(np.mean([vecs[p] for p in plan], axis=0)), "mean"
        else:
            dists = [float(np.linalg.norm(r - vecs[p])) for p in plan]
            c, mode = vecs[plan[int(np.argmin(dists))]], "nearest"
        raw, d_rq, d_rc = sgi_from_vectors(r, q, c)
        out.append(_sgi_result(raw, d_rq, d_rc, mode, len(plan), emb, it, ev, checked))
    return out


def evaluate(
    question: str | None = None,
    response: str | None = None,
    context: str | Sequence[str | None] | None = None,
    *,
    embedder=None,
    calibration: CalibrationResult | str | os.PathLike[str] | None = None,
    long_context: str = DEFAULT_LONG_CONTEXT,
    evidence: bool = True,
    upstream: Sequence[Upstream] = (),
) -> GroundlensResult:
    """Score one response. Raises a one-line :class:`GroundlensInputError` on bad input.

    - question and context: SGI (plus sentence evidence and support unless ``evidence=False``);
    - context and no (or a blank) question: ``support``, the response against its context alone
      (summaries, extraction, rewriting; SGI is never computed on an invented question);
    - question and no context: DGI.

    A context given as a list of pieces keeps their places: the evidence names the piece each
    best passage lies in (``passage_piece``), and a piece given as None counts as blank.
    ``upstream`` are the unverified outputs of earlier steps that the context carries
    (:class:`~groundlens_core.scoring.decision.Upstream`; a trace's lineage finds them): a response
    whose support comes from one is at most review, decided with the band, not after it.
    """
    item = _with_upstream(_make_item(question, response, context), upstream)
    return _score_items([item], embedder or get_default_embedder(), calibration, long_context, evidence)[0]


def compute_sgi(
    question: str,
    response: str,
    context: str | Sequence[str],
    *,
    embedder=None,
    long_context: str = DEFAULT_LONG_CONTEXT,
    evidence: bool = True,
) -> SGIResult:
    """SGI of a response given its context (which must be non-blank)."""
    ctx, pieces = join_context_pieces(context)
    if ctx is None:
        raise GroundlensInputError("context is blank; SGI needs a context (use compute_dgi or evaluate)")
    item = _Item(_check_text("question", question), _check_text("response", response), ctx, pieces)
    return _score_items([item], embedder or get_default_embedder(), None, long_context, evidence)[0]  # type: ignore[return-value]


def compute_dgi(
    question: str,
    response: str,
    *,
    embedder=None,
    calibration: CalibrationResult | str | os.PathLike[str] | None = None,
    reference_csv: str | os.PathLike[str] | None = None,
) -> DGIResult:
    """DGI of a response against ``calibration`` (default: the bundled generic direction), or
    against a direction calibrated on the fly from ``reference_csv`` (verified grounded pairs,
    columns ``question``, ``response``; cached by the file's content, as in the original API)."""
    item = _Item(_check_text("question", question), _check_text("response", response), None)
    emb = embedder or get_default_embedder()
    if reference_csv is not None:
        if calibration is not None:
            raise GroundlensInputError("compute_dgi takes calibration= or reference_csv=, not both")
        calibration = calibration_from_csv(reference_csv, emb)
    return _score_items([item], emb, calibration, DEFAULT_LONG_CONTEXT)[0]  # type: ignore[return-value]


def evaluate_batch(
    items: Iterable[Any],
    *,
    embedder=None,
    calibration: CalibrationResult | str | os.PathLike[str] | None = None,
    long_context: str = DEFAULT_LONG_CONTEXT,
    errors: str = "record",
    chunk_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
    evidence: bool = True,
) -> list[GroundlensResult | ScoreError]:
    """Score many items, results in input order.

    Items are mappings (``question``, ``response``, optional ``context`` and ``upstream``, as in
    :func:`evaluate`) or tuples; the method per item is chosen as in :func:`evaluate`. The unique
    texts of each chunk of ``chunk_size`` items are embedded together. With ``errors="record"``
    a bad row becomes a :class:`ScoreError` and every other row is still scored; with
    ``errors="raise"`` the first bad row raises.
    """
    if errors not in ("record", "raise"):
        raise ValueError("errors must be 'record' or 'raise'")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise GroundlensInputError(f"chunk_size must be a whole number of at least 1, got {chunk_size!r}")
    emb = embedder or get_default_embedder()
    raw_items = list(items)
    results: list[GroundlensResult | ScoreError | None] = [None] * len(raw_items)
    prepared: list[tuple[int, _Item]] = []
    for i, item in enumerate(raw_items):
        try:
            prepared.append((i, _prepare(item)))
        except GroundlensError as exc:
            if errors == "raise":
                raise
            results[i] = ScoreError(index=i, error=str(exc))
    done = len(raw_items) - len(prepared)
    for start in range(0, len(prepared), chunk_size):
        chunk = prepared[start : start + chunk_size]
        try:
            scored = _score_items([it for _, it in chunk], emb, calibration, long_context, evidence)
        except Exception:
            if errors == "raise":
                raise
            scored = [_score_one_or_error(idx, it, emb, calibration, long_context, evidence) for idx, it in chunk]  # type: ignore[misc]
        for (idx, _), res in zip(chunk, scored):
            results[idx] = res
        done += len(chunk)
        if progress is not None:
            progress(done, len(raw_items))
    return results  # type: ignore[return-value]


def _score_one_or_error(
    idx: int, item: _Item, emb, calibration, long_context: str, evidence: bool = True
) -> GroundlensResult | ScoreError:
    """Fallback when a chunk failed as a whole: find which rows fail, keep the others."""
    try:
        return _score_items([item], emb, calibration, long_context, evidence)[0]
    except GroundlensError as exc:
        return ScoreError(index=idx, error=str(exc))
    except Exception as exc:  # a bug or a broken model must not cost the other rows
        return ScoreError(index=idx, error=describe_exception(exc))
