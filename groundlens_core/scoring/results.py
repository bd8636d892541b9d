"""Frozen result types. Their JSON is canonical: the same input gives the same bytes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from groundlens_core.renamed import renamed
from groundlens_core.scoring.decision import Decision


def canonical_json(data: Any) -> str:
    """Sorted keys, fixed separators, no NaN: byte-stable across runs and processes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


REDACTED = "[redacted]"


def quote_sentence(text: str, limit: int = 160) -> str:
    """How explanations quote a sentence: whole up to ``limit`` characters, else cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def redact_score_dict(score: dict[str, Any]) -> dict[str, Any]:
    """A score dict without any of the caller's text: evidence sentences, passages, unsupported
    tokens and facts become ``[redacted]`` (offsets, counts and numbers stay), and the explanation
    stops quoting the weakest sentence and the facts."""
    out = dict(score)
    expl = out.get("explanation")
    decision = out.get("decision")
    if isinstance(decision, dict):  # its findings may be another step's (grounded in a flagged output)
        for f in decision.get("findings", ()):
            if isinstance(expl, str) and isinstance(f.get("text"), str):
                expl = expl.replace(FactFinding(**f).describe(), REDACTED)
        out["decision"] = redact_decision_dict(decision)
        out["explanation"] = expl
    ev = score.get("evidence")
    if not isinstance(ev, dict):
        return out
    sentences = []
    for s in ev.get("sentences", ()):
        if isinstance(expl, str) and isinstance(s.get("text"), str):
            expl = expl.replace(f'"{quote_sentence(s["text"])}"', f'"{REDACTED}"')
        sentences.append(
            {
                **s,
                "text": REDACTED,
                "passage": REDACTED,
                "unsupported": [{**u, "text": REDACTED} for u in s.get("unsupported", ())],
            }
        )
    facts = []
    for f in ev.get("facts", ()):
        if isinstance(expl, str) and isinstance(f.get("text"), str):
            expl = expl.replace(FactFinding(**f).describe(), REDACTED)
        facts.append({**f, "text": REDACTED, "source": None if f.get("source") is None else REDACTED})
    out["evidence"] = {**ev, "sentences": sentences, "facts": facts}
    out["explanation"] = expl
    return out


def redact_decision_dict(decision: dict[str, Any]) -> dict[str, Any]:
    """A decision dict without the caller's text: its findings' texts and the source's values become
    ``[redacted]``, and its reason is rendered again from what is left."""
    findings = [
        {**f, "text": REDACTED, "source": None if f.get("source") is None else REDACTED}
        for f in decision.get("findings", ())
    ]
    out = {**decision, "findings": findings}
    if "reason" in out:
        out["reason"] = Decision.from_dict(out, FactFinding).reason
    return out


@dataclass(frozen=True)
class TokenSpan:
    """A content token as it stands in a text: its words, kind and ``[start, end)`` offsets."""

    text: str
    kind: str  # "number" | "date" | "name" | "word"
    start: int
    end: int


@dataclass(frozen=True)
class UnsupportedToken(TokenSpan):
    """A content token of a response sentence that the context does not contain (offsets in the response)."""


@dataclass(frozen=True)
class FactFinding:
    """One specific fact of the response (an amount, a duration, a date, a name ...) checked against
    the context: ``supported``, ``contradicted`` (the context states another value about the same
    thing: ``source`` says what) or ``unsupported`` (the context states nothing of the kind).
    Offsets index the response; ``sentence`` indexes the evidence's sentences."""

    text: str
    kind: str
    start: int
    end: int
    sentence: int
    #: "supported" | "contradicted" | "unsupported" | "unverified" (shown, never flags) | "question"
    #: (a value the question states: the user's situation, not held against the source)
    status: str
    source: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("contradicted", "unsupported")

    def describe(self) -> str:
        """``25% — the source says 15%`` / ``Volta World Pass — not in the source`` / ``not in the
        source: installation is included`` / ``you can get a refund — the source adds a condition:
        only for cancellations made 48 hours ahead``."""
        if self.kind == "claim" and self.status == "unsupported":
            return f"not in the source: {self.text}"
        if self.kind == "condition" and self.status == "unsupported" and self.source:
            return f"{self.text} \u2014 the source adds a condition: {self.source}"
        if self.status == "contradicted" and self.source:
            return f"{self.text} \u2014 the source says {self.source}"
        if self.status == "unsupported":
            return f"{self.text} \u2014 not in the source"
        return self.text


@dataclass(frozen=True)
class SentenceEvidence:
    """One response sentence, its best-supporting context passage, and what the context lacks.

    ``start``/``end`` index the response, ``passage_start``/``passage_end`` the context (a list of
    context pieces is indexed as joined with blank lines, see ``join_context``). ``support`` is the
    share of the sentence's content tokens the context contains (1.0 when it has none to check).
    ``passage_piece`` is the index, in the list of context pieces the caller gave, of the piece the
    passage lies in: the joined offsets alone cannot say which tool or document it came from. None
    when the context was given as one text (and then left out of the dict form, so such a score's
    JSON is the same as before).
    """

    start: int
    end: int
    text: str
    support: float
    content_tokens: int
    unsupported: tuple[UnsupportedToken, ...]
    similarity: float  # cosine of the sentence and its best passage
    passage_start: int
    passage_end: int
    passage: str
    passage_piece: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, checked: bool = False) -> SentenceEvidence:
        if not checked:
            d = dict(d)
            d["unsupported"] = tuple(UnsupportedToken(**u) for u in d.get("unsupported", ()))
            return cls(**d)
        d = typed_fields(cls, d, "an evidence sentence")
        unsupported = d.get("unsupported", ())
        d["unsupported"] = tuple(UnsupportedToken(**typed_fields(UnsupportedToken, u, "a token")) for u in unsupported)
        return cls(**d)


@dataclass(frozen=True)
class Evidence:
    """Sentence-level evidence for a response scored against a context.

    ``support`` = share of the response's content tokens (numbers, dates, names, content words) that
    the context contains; ``weakest`` = index of the sentence stating the most the context lacks
    (ties: the one least similar to its best passage), ``None`` when every sentence is supported.
    """

    support: float
    content_tokens: int
    unsupported_tokens: int
    weakest: int | None
    sentences: tuple[SentenceEvidence, ...]
    context_passages: int
    splitter: str = "groundlens-sentences/1"
    #: every specific fact of the response, checked against the context (see factcheck.py)
    facts: tuple[FactFinding, ...] = ()
    #: the sentences (indexes into ``sentences``) that say the source does not answer and assert
    #: nothing besides: they are left out of the fact checks and the support (see abstention.py)
    abstentions: tuple[int, ...] = ()

    @property
    def abstains(self) -> bool:
        """Every sentence of the response says the source does not answer."""
        return bool(self.sentences) and len(self.abstentions) == len(self.sentences)

    @property
    def weakest_sentence(self) -> SentenceEvidence | None:
        return None if self.weakest is None else self.sentences[self.weakest]

    def failed_facts(self) -> list[FactFinding]:
        return [f for f in self.facts if f.failed]

    def unsupported(self) -> list[UnsupportedToken]:
        return [u for s in self.sentences for u in s.unsupported]

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, checked: bool = False) -> Evidence:
        """The evidence from its dict; ``checked=True`` (a file being read) refuses a field of the
        wrong type with a ``ValueError`` naming it (:func:`typed_fields`)."""
        if not checked:
            d = dict(d)
            d["sentences"] = tuple(SentenceEvidence.from_dict(s) for s in d.get("sentences", ()))
            d["facts"] = tuple(FactFinding(**f) for f in d.get("facts", ()))
            d["abstentions"] = tuple(d.get("abstentions") or ())
            return cls(**d)
        d = typed_fields(cls, d, "the evidence")
        marks = d.get("abstentions") or ()
        n = len(d.get("sentences") or ())
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in marks) or len(
            set(marks)
        ) != len(marks):
            raise ValueError("the evidence: abstentions must list distinct indexes of its sentences")
        d["abstentions"] = tuple(marks)
        d["sentences"] = tuple(SentenceEvidence.from_dict(s, checked=True) for s in d.get("sentences", ()))
        d["facts"] = tuple(FactFinding(**typed_fields(FactFinding, f, "a fact")) for f in d.get("facts", ()))
        return cls(**d)


@dataclass(frozen=True)
class SentenceVerdict:
    """The verifier's calibrated probability that one response sentence is supported by the source;
    ``start``/``end`` index the response."""

    start: int
    end: int
    probability: float


@dataclass(frozen=True)
class Verdict:
    """The verifier's reading of a response against its context.

    ``probability`` is its calibrated probability that the response is faithful: that of its weakest
    sentence (``weakest`` indexes ``sentences``). ``verifier`` names the weights (format and the
    first 12 hex digits of their SHA-256). A triage signal for ranking, not a verdict of truth."""

    probability: float
    weakest: int | None
    sentences: tuple[SentenceVerdict, ...]
    verifier: str
    #: the verifier's trust edge: a sentence below it is one the verifier doubts (its findings may
    #: explain a band), at or above it one it trusts (None in a verdict saved without it)
    trust_from: float | None = None

    @property
    def weakest_sentence(self) -> SentenceVerdict | None:
        return None if self.weakest is None else self.sentences[self.weakest]

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, checked: bool = False) -> Verdict:
        if checked:
            d = typed_fields(cls, d, "the verdict")
        else:
            d = dict(d)
        sentences = d.get("sentences", ())
        if checked:
            d["sentences"] = tuple(
                SentenceVerdict(**typed_fields(SentenceVerdict, s, "a sentence verdict")) for s in sentences
            )
        else:
            d["sentences"] = tuple(SentenceVerdict(**s) for s in sentences)
        return cls(**d)


def typed_fields(cls: type, d: Any, what: str, *, nullable: bool = False) -> dict[str, Any]:
    """The fields of dataclass ``cls`` in the JSON object ``d``, each checked against its type
    (unknown keys dropped; a missing field is left to the constructor). Why: a saved trace is a
    user's file, and a wrong type (``"evidence": "x"``, ``"support": "high"``) would otherwise
    surface as a traceback wherever the value is first used, far from the file that held it.
    ``nullable``: null passes for any field (a score's missing fields are None, and saved so)."""
    import typing

    if not isinstance(d, dict):
        raise ValueError(f"{what} must be an object, got {_json_kind(d)}")
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            value = d[f.name]
            if not (nullable and value is None) and not _fits(value, hints[f.name]):
                raise ValueError(f"{what}: {f.name} must be {_expected(hints[f.name])}, got {_json_kind(value)}")
            out[f.name] = value
    return out


def _fits(value: Any, hint: Any) -> bool:
    import math
    import types
    import typing

    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple:
        return isinstance(value, (list, tuple))  # the items are read by their own type
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict) or (isinstance(hint, type) and isinstance(value, hint))
    return True


def _expected(hint: Any) -> str:
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_expected(a) for a in typing.get_args(hint))
    names = {type(None): "null", bool: "true/false", int: "a whole number", float: "a number", str: "text"}
    if hint in names:
        return names[hint]
    return "a list" if typing.get_origin(hint) is tuple else "an object"


def _json_kind(value: Any) -> str:
    import math

    names = {str: "text", bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object"}
    if isinstance(value, float) and not math.isfinite(value):
        return "a number that is not finite"
    return "null" if value is None else names.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class GroundlensResult:
    """The result of scoring one (question, response[, context]): a triage signal, never a verdict
    of truth. Its :attr:`score` is the number reports rank by; the object is the result, so that
    "score" names one thing."""

    method: str  # "sgi" | "dgi" | "support"
    value: float  # raw SGI, DGI or support
    normalized: float  # in [0, 1], higher = better grounded
    flagged: bool  # triage == "flagged"
    triage: str  # "trusted" | "review" | "flagged"
    explanation: str
    fingerprint: str  # embedder model id + SHA-256 of its weights
    backend: str  # embedding backend that produced the vectors
    version: str  # groundlens-core version
    #: the score: in [0, 1], higher = better grounded, the value shown everywhere and ranked by (lower
    #: = review first); the band is a function of it (see decision.py)
    score: float = field(default=0.0, kw_only=True)
    #: why the band, as data (rule, failed facts with what the source says); None in an older saved score
    decision: Decision | None = field(default=None, kw_only=True)
    #: the trained verifier's reading (with a context and evidence on); None without one
    verdict: Verdict | None = field(default=None, kw_only=True)

    rank = renamed("score", "GroundlensResult.rank")

    @property
    def reason(self) -> str | None:
        """Why the band, in a few words (the explanation's first clause), rendered from :attr:`decision`."""
        return None if self.decision is None else self.decision.reason

    def to_dict(self) -> dict[str, Any]:
        out = _plain(dataclasses.asdict(self))
        if self.decision is not None:  # the rendered reason too, for readers of the JSON
            out["decision"]["reason"] = self.decision.reason
        evidence = out.get("evidence")
        if isinstance(evidence, dict):  # a passage's piece only when known: else the bytes of before
            for sentence in evidence.get("sentences", ()):
                if sentence.get("passage_piece", 0) is None:
                    del sentence["passage_piece"]
        return out

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


def _plain(value: Any) -> Any:
    """Tuples (evidence sentences, unsupported tokens) as lists: plain JSON data, as a round trip gives."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


#: the older name of :class:`GroundlensResult`, kept so code written against it still runs
GroundlensScore = GroundlensResult


@dataclass(frozen=True)
class SGIResult(GroundlensResult):
    d_response_question: float
    d_response_context: float
    context_mode: str  # "whole" | "mean" | "nearest" (how phi(ctx) was formed)
    context_chunks: int
    support: float | None = field(default=None, kw_only=True)  # Evidence.support, when evidence is on
    evidence: Evidence | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class SupportResult(GroundlensResult):
    """A response checked against its context alone (no question: summaries, extraction, rewriting).

    ``value`` is the support (share of the response's content the context contains); SGI is never
    computed here, because it needs a real question.
    """

    evidence: Evidence


@dataclass(frozen=True)
class DGIResult(GroundlensResult):
    displacement_norm: float
    direction: str  # which direction: "bundled:<name>" or "calibration:<sha>"


@dataclass(frozen=True)
class ScoreError:
    """A row of a batch that could not be scored; the rest of the batch still is."""

    index: int
    error: str
    method: str = "error"
    triage: str = "error"
    flagged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())


def score_from_dict(data: dict[str, Any]) -> GroundlensResult | ScoreError:
    kind = {"sgi": SGIResult, "dgi": DGIResult, "support": SupportResult, "error": ScoreError}.get(
        data.get("method", "")
    )
    if kind is None:
        raise ValueError(f"not a groundlens score: method={data.get('method')!r}")
    names = {f.name for f in dataclasses.fields(kind)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if kind is not ScoreError:
        _read_older(data, kwargs)
    return kind(**kwargs)


def _read_older(data: dict[str, Any], values: dict[str, Any], checked: bool = False) -> None:
    """The score of a dict written by an older version (``rank`` before ``score``, ``normalized``
    before both), its evidence and decision rebuilt from their dicts."""
    if "score" not in data:
        old = data.get("rank", data.get("normalized"))
        if isinstance(old, (int, float)):
            values["score"] = old
    if isinstance(values.get("evidence"), dict):
        values["evidence"] = Evidence.from_dict(values["evidence"], checked=checked)
    if isinstance(values.get("verdict"), dict):
        try:
            values["verdict"] = Verdict.from_dict(values["verdict"], checked=checked)
        except TypeError as exc:
            raise ValueError(f"the score: verdict is not a verdict ({type(exc).__name__})") from None
    if isinstance(values.get("decision"), dict):
        try:
            values["decision"] = Decision.from_dict(values["decision"], FactFinding)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"the score: decision is not a decision ({type(exc).__name__})") from None


def as_score(data: Any, *, checked: bool = False) -> GroundlensResult | None:
    """The result object for a trace step: a result as it is, or one rebuilt from its JSON dict.

    Lenient on purpose, because it reads saved traces: keys it does not know are dropped, and a
    field the dict lacks (a hand-built or older trace) is None unless the field has a default
    (``score`` of an older score is its ``rank``, else its ``normalized``). ``None`` stays None; anything else that is
    not an SGI/DGI/support score is a ``ValueError``. ``checked=True`` (a file being read) also
    refuses a field of the wrong type (:func:`typed_fields`), a ``ValueError`` naming it.
    """
    if data is None or isinstance(data, GroundlensResult):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"a step's result must be a result object or its dict, got {type(data).__name__}")
    method = data.get("method")
    kind = {"sgi": SGIResult, "dgi": DGIResult, "support": SupportResult}.get(method if isinstance(method, str) else "")
    if kind is None:
        raise ValueError(f"not a groundlens score: method={method!r}"[:120])
    if not checked:
        values = {f.name: data[f.name] for f in dataclasses.fields(kind) if f.name in data}
    else:
        values = typed_fields(kind, data, "the score", nullable=True)
    if checked and values.get("triage", "trusted") not in ("trusted", "review", "flagged"):
        raise ValueError(f"the score: triage must be trusted, review or flagged, got {str(values['triage'])[:40]!r}")
    for f in dataclasses.fields(kind):
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = None
    _read_older(data, values, checked)
    return kind(**values)
