"""The band of a result and its one risk value: the number shown everywhere is the number ranked.

The band is decided from the evidence, in this order:

- **flagged** ("review first"): a specific fact of the response (an amount, a duration, a date, a
  name ...) is contradicted by its source or absent from it, or a claim without a number is (a
  polarity the source states the other way, a condition of the source dropped, a clause the source
  never makes: :mod:`groundlens_core.evidence.claims`); without a question, only the findings that mark
  summaries (see :func:`_loose_in_a_summary`); or the response ignores its source:
  SGI below 0.95 (no closer to its context than to the question) with one content word in three
  absent from the source (``support < 2/3``) and no value of the source stated, or, with no
  question, half its content words absent (``support < 0.50``). Without a context: DGI at or below
  the method's pass mark (0.30).
- **trusted**: every fact is in the source, SGI is a strong pass (> 1.20) and support is at least
  0.80 (support above 0.95 when there is no question, so no SGI).
- **review**: a response that only says the source does not answer (an abstention: it claims
  nothing the source could contradict, and a person checks that the source really lacks it), and
  the rest. Weaker word evidence (a paraphrase, a response that leans only weakly toward
  its context, SGI below 0.95) means review, never flagged: words rank, facts flag. A response
  scored without a context (DGI) is never trusted: no context, weak signal.

The **score** is in [0, 1], higher = better grounded, and a function of the band first: flagged
scores lie in [0, 1/3), review in [1/3, 2/3), trusted in [2/3, 1]. Within a band it follows the
word-level evidence (the mean of normalized SGI and support; support alone without a question;
normalized DGI without a context), halved for each failed fact. So a flagged result never shows a
higher score than a trusted one, and sorting by the score is sorting by the band, then the evidence.

A decision is data (:class:`Decision`: band, score, the rule that gave the band, the failed facts
with what the source says), because many readers need it: the explanation, the report row, the
ledger record, the OTel attributes and an agent asked to revise all render their text from it, so
none of them has to read text back.

**Upstream.** In a multi-step agent an unsupported claim travels: a planner's invented fact becomes
the next step's context, and that step looks grounded against a context that already carries the
error. So every decision takes, besides the evidence, the unverified outputs its context carries
(:class:`Upstream`: the output of an earlier step of the same trace that was flagged, or could not
be scored; a trace's lineage finds them) and decides the band once, with them: being grounded in a
flagged output is not being grounded. A response whose support comes from such an output is at most
review, with the rule ``grounded_in_flagged`` (the origin's findings, with what its source says) or
``grounded_in_error``, and a trusted score moves down into the review third, keeping its place
within it; a flagged response stays flagged (its own facts fail). Its support comes from that output
when one of its sentences finds its best-supporting passage there (the passage contains one of the
output's sentences, or lies inside one), or when it has no sentence evidence to tell. So a response
with both a real source and a flagged output in its context keeps its own band only when every
sentence leans on the real source. The explanation is rendered from the one decision, so its
opening and the band always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from groundlens_core.scoring.bands import Triage, normalize, triage

if TYPE_CHECKING:  # results.py holds a Decision in every score, so this module imports it only for types
    from groundlens_core.scoring.results import Evidence, FactFinding, Verdict

__all__ = [
    "Decision",
    "RULES",
    "Upstream",
    "decide_sgi",
    "decide_support",
    "decide_dgi",
    "decide_verified",
    "band_of_score",
    "folded",
    "output_sentences",
    "opening",
    "MIN_CHARS",
    "SCORE_EDGES",
]

#: scores below the first edge are flagged, below the second review, the rest trusted
SCORE_EDGES = (1 / 3, 2 / 3)
_BAND_START = {"flagged": 0.0, "review": SCORE_EDGES[0], "trusted": SCORE_EDGES[1]}
IGNORES_SOURCE = 0.50  # support below this: at least half the content words are not in the source
IGNORES_SOURCE_WITH_SGI = 2 / 3  # with SGI below 0.95: a third of the content words are not in the source
STRONG_SUPPORT = 0.80  # with SGI > 1.20: trusted
STRONG_SUPPORT_ALONE = 0.95  # no question: trusted on support alone
MAX_FACTS_SHOWN = 3
_NOT_VALUES = frozenset({"name", "label", "polarity", "scope", "count", "year", "claim", "condition"})
#: findings about a clause, not a value (:mod:`groundlens_core.evidence.claims`)
CLAIM_KINDS = frozenset({"polarity", "scope", "claim", "condition"})


#: every rule a decision can come from: its code and why it gives its band, in a few words (the
#: explanation's first clause). ``{facts}``, ``{absent}``, ``{total}`` and ``{origin}`` are filled in
#: from the decision's own data (:meth:`Decision.reason`).
RULES: dict[str, str] = {
    "sgi_low": "SGI is below 0.95: the response is no closer to its context than to the question",
    "sgi_weak": "SGI leans only weakly toward the context",
    "sgi_strong": "SGI is a strong pass",
    "restates_question": "the response restates the question",
    "facts": "{facts_are} not supported by the source{facts}",
    "facts_in_summary": (
        "{facts_are} not supported by the source, which in a text without a question ranks it lower{facts}"
    ),
    "ignores_source_sgi": (
        "{absent} of its {total} content words are not in the source; it may ignore its source, and SGI is below 0.95"
    ),
    "ignores_source": "{absent} of its {total} content words are not in the source; it may ignore its source",
    "grounded": "every fact it states is in the source",
    "facts_in_source_not_closer": (
        "the facts it states are in the source, but it is no closer to its context than to the question"
    ),
    "facts_in_source_weak": "the facts it states are in the source, but it leans only weakly toward its context",
    "facts_in_source_wording": "the facts it states are in the source, but much of its wording is not",
    "no_content_words": "it has no content words to check",
    "abstains": "it says the source does not answer; check that the source really does not",
    "grounded_words": "its facts and nearly all its words are in the source",
    "facts_in_source_some_words": "its facts are in the source, but some of its words are not",
    "dgi_low": "no context, and DGI is at or below its pass mark",
    "dgi_weak": "no context: a weak signal",
    "grounded_in_flagged": "grounded in the flagged output of #{origin}{facts}",
    "grounded_in_error": "grounded in the output of #{origin}, which could not be scored",
    "verified_unsupported": "the verifier finds it unlikely that the source supports it ({p}){facts}",
    "verified_uncertain": "the verifier is unsure the source supports all of it ({p}){facts}",
    "verified_supported": "the verifier finds it supported by the source ({p})",
}


@dataclass(frozen=True)
class Decision:
    """Why a result has its band, as data: every explanation, report row, ledger record and export
    renders its text from this, so none of them reads text back.

    ``findings`` are the facts that decided the band (the failed ones, each with ``status`` and what
    the source says in ``source``); for ``grounded_in_flagged`` they are the origin step's findings.
    ``unsupported_words`` / ``content_words`` are the word counts a word rule names; ``origin`` is the
    index of the step whose unverified output the response is grounded in."""

    band: Triage
    score: float  # in the band's third of [0, 1]
    rule: str  # a key of RULES
    findings: tuple[FactFinding, ...] = ()
    unsupported_words: int = 0
    content_words: int = 0
    origin: int | None = None
    #: the verifier's calibrated probability that the response is faithful, when it decided
    probability: float | None = None

    @property
    def reason(self) -> str:
        """Why the band, in a few words, with the failed facts and what the source says."""
        return self.render(values=True)

    def render(self, *, values: bool = True) -> str:
        """The reason; with ``values=False`` without any of the caller's text (the facts and the
        source's values are left out; counts and step numbers stay): what a ledger keeps by default."""
        failed = self.findings
        shown = "; ".join(f.describe() for f in failed[:MAX_FACTS_SHOWN])
        more = f" (and {len(failed) - MAX_FACTS_SHOWN} more)" if len(failed) > MAX_FACTS_SHOWN else ""
        facts = f": {shown}{more}" if values and failed else ""
        claims = any(f.kind in CLAIM_KINDS for f in failed)
        if len(failed) == 1:
            what = "a claim is" if claims else "a specific fact is"
        else:
            what = f"{len(failed)} findings are" if claims else f"{len(failed)} specific facts are"
        template = RULES.get(self.rule, "{rule}")
        return template.format(
            facts=facts,
            facts_are=what,
            absent=self.unsupported_words,
            total=self.content_words,
            origin=self.origin,
            rule=self.rule,
            p="" if self.probability is None else f"P {self.probability:.2f}",
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], finding: Any) -> Decision:
        """A decision from its JSON form; ``finding`` builds one finding from its dict. Keys it does
        not know (the rendered ``reason``) are dropped."""
        return cls(
            band=data["band"],
            score=data["score"],
            rule=data["rule"],
            findings=tuple(f if not isinstance(f, Mapping) else finding(**f) for f in data.get("findings", ())),
            unsupported_words=int(data.get("unsupported_words", 0)),
            content_words=int(data.get("content_words", 0)),
            origin=data.get("origin"),
            probability=data.get("probability"),
        )


def opening(decision: Decision) -> str:
    """The explanation's first clause: the score that is ranked, its band and why."""
    return f"Score {decision.score:.2f}, {decision.band}: {decision.reason}."


#: sentences (and whole outputs) shorter than this, once :func:`folded`, never tie a response to an
#: upstream output: "Yes." proves nothing
MIN_CHARS = 24


def folded(text: str) -> str:
    """``text`` with its white space collapsed and its case folded: how a context, a passage and an
    upstream output are compared, so a copy that was re-wrapped or re-cased still matches."""
    return " ".join(text.split()).casefold()


def output_sentences(text: str) -> frozenset[str]:
    """The :func:`folded` sentences of an output long enough to count (:data:`MIN_CHARS`), or the
    whole output when it is long enough and none of its sentences is."""
    from groundlens_core.evidence.sentences import split_sentences  # the sentence splitter of the evidence

    out = {n for n in (folded(span.text) for span in split_sentences(text)) if len(n) >= MIN_CHARS}
    whole = folded(text)
    if len(whole) >= MIN_CHARS and not out:
        out.add(whole)
    return frozenset(out)


@dataclass(frozen=True)
class Upstream:
    """An unverified output that a response's context carries, as an input of its decision: the
    output of step ``#origin`` of the same trace, which was flagged (``band="flagged"``, with its
    ``findings``) or could not be scored (``"error"``). For an output that was itself grounded in
    such an output, ``origin`` is the first origin (with its band and findings) and ``sentences``
    are still that output's own. ``sentences`` are the output's sentences as
    :func:`output_sentences` gives them; :meth:`of` builds one from the output's text."""

    origin: int
    band: Literal["flagged", "error"] = "flagged"
    findings: tuple[FactFinding, ...] = ()
    sentences: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, origin: int, output: str, band: Literal["flagged", "error"] = "flagged", findings: Sequence[Any] = ()
    ) -> Upstream:
        """The upstream input for ``output``, the response of step ``#origin``."""
        return cls(origin, band, tuple(findings), output_sentences(output))


def _leaned_on(ev: Evidence | None, upstream: Sequence[Upstream]) -> Upstream | None:
    """The first of ``upstream`` the response's support comes from: one of whose sentences contains
    (or lies inside) the best-supporting passage of one of the response's sentences; the first of
    all when the response has no sentence evidence to tell (no context evidence, or none kept)."""
    if ev is None or not ev.sentences or not all(isinstance(s.passage, str) for s in ev.sentences):
        return upstream[0]
    passages = [p for p in (folded(s.passage) for s in ev.sentences) if len(p) >= MIN_CHARS]
    for up in upstream:
        if any(p in c or c in p for p in passages for c in up.sentences):
            return up
    return None


def _grounded_in(decision: Decision, ev: Evidence | None, upstream: Sequence[Upstream]) -> Decision:
    """``decision`` with its upstream: at most ``review`` when its support comes from one of the
    unverified outputs (the first it leans on names the rule); a trusted score moves down into the
    review third, keeping its place within it; a flagged decision stays as it is (its own facts fail)."""
    if not upstream or decision.band == "flagged":
        return decision
    up = _leaned_on(ev, upstream)
    if up is None:
        return decision
    score = decision.score - (SCORE_EDGES[1] - SCORE_EDGES[0]) if decision.band == "trusted" else decision.score
    rule = "grounded_in_error" if up.band == "error" else "grounded_in_flagged"
    return Decision(
        "review",
        score,
        rule,
        tuple(up.findings) if rule == "grounded_in_flagged" else (),
        origin=up.origin,
        probability=decision.probability,
    )


def band_of_score(score: float) -> Triage:
    """The band a score lies in (the inverse of the banding in :func:`_score`)."""
    if score < SCORE_EDGES[0]:
        return "flagged"
    return "review" if score < SCORE_EDGES[1] else "trusted"


def _score(band: Triage, evidence_value: float, failed: int = 0) -> float:
    inner = min(max(evidence_value, 0.0), 1.0) * 0.5**failed
    return _BAND_START[band] + min(inner, 0.999) / 3.0


def _failed_findings(ev: Evidence) -> dict[str, Any]:
    return {"findings": tuple(ev.failed_facts())}


def _words(ev: Evidence) -> dict[str, Any]:
    return {"unsupported_words": ev.unsupported_tokens, "content_words": ev.content_tokens}


def decide_sgi(raw: float, ev: Evidence | None, upstream: Sequence[Upstream] = ()) -> Decision:
    """SGI with (or, with ``evidence=False``, without) sentence evidence, and the unverified outputs
    its context carries (``upstream``)."""
    return _grounded_in(_own_sgi(raw, ev), ev, upstream)


def _own_sgi(raw: float, ev: Evidence | None) -> Decision:
    sgi_band = triage("sgi", raw)
    if ev is None:  # SGI alone: the method's own bands
        reason = {"flagged": "sgi_low", "review": "sgi_weak", "trusted": "sgi_strong"}[sgi_band]
        return Decision(sgi_band, _score(sgi_band, normalize("sgi", raw)), reason)
    base = (normalize("sgi", raw) + normalize("support", ev.support)) / 2.0
    if raw == 0.0:  # the response embeds like the question: it restates it, whatever its words
        return Decision("flagged", _score("flagged", base), "restates_question")
    if ev.abstains:  # it claims nothing the source could contradict: a person checks the source lacks it
        return Decision("review", _score("review", normalize("sgi", raw)), "abstains")
    failed = len(ev.failed_facts())
    if failed:
        return Decision("flagged", _score("flagged", base, failed), "facts", **_failed_findings(ev))
    # it states a value of its source with its unit (an amount, a duration, a date ...); a name or a
    # bare number ("Aurora-7") only echoes the topic
    supported = any(f.status == "supported" and f.kind not in _NOT_VALUES for f in ev.facts)
    if ev.content_tokens and ev.support < IGNORES_SOURCE_WITH_SGI and sgi_band == "flagged" and not supported:
        return Decision("flagged", _score("flagged", base), "ignores_source_sgi", **_words(ev))
    if sgi_band == "trusted" and ev.support >= STRONG_SUPPORT:
        return Decision("trusted", _score("trusted", base), "grounded")
    if sgi_band == "flagged":
        why = "facts_in_source_not_closer"
    elif sgi_band == "review":
        why = "facts_in_source_weak"
    else:
        why = "facts_in_source_wording"
    return Decision("review", _score("review", base), why)


def _loose_in_a_summary(f: FactFinding) -> bool:
    """A finding that does not flag a text read without a question (a summary, a rewrite): a
    summary drops conditions, adds framing, shortens names ("Johnstone" for "Denny Johnstone" is
    supported, but "Volta Pass" against "Volta World Pass" is contradicted) and dates things
    loosely, so an added clause, a dropped condition, a name the source gives otherwise and a year
    rank it lower within review instead. On the FaithBench dev rows these findings marked
    hallucinated summaries no more often than chance, while a changed or absent value, an absent
    name and a flipped polarity marked them four times in five."""
    return f.kind in ("claim", "condition", "year") or (f.kind == "name" and f.status == "contradicted")


def decide_support(ev: Evidence, upstream: Sequence[Upstream] = ()) -> Decision:
    """No question: the response against its context alone (and the unverified outputs it carries)."""
    return _grounded_in(_own_support(ev), ev, upstream)


def _own_support(ev: Evidence) -> Decision:
    if ev.abstains:
        return Decision("review", _score("review", 0.5), "abstains")
    failed = ev.failed_facts()
    hard = tuple(f for f in failed if not _loose_in_a_summary(f))
    loose = tuple(f for f in failed if _loose_in_a_summary(f))
    if hard:  # every failed finding is named, the ones that flag first
        return Decision("flagged", _score("flagged", ev.support, len(hard)), "facts", findings=hard + loose)
    if loose and ev.content_tokens and ev.support >= IGNORES_SOURCE:  # never trusted, named, not flagged
        return Decision("review", _score("review", ev.support), "facts_in_summary", findings=loose)
    if not ev.content_tokens:
        return Decision("review", _score("review", ev.support), "no_content_words")
    if ev.support < IGNORES_SOURCE:
        return Decision("flagged", _score("flagged", ev.support), "ignores_source", **_words(ev))
    if ev.support > STRONG_SUPPORT_ALONE:
        return Decision("trusted", _score("trusted", ev.support), "grounded_words")
    return Decision("review", _score("review", ev.support), "facts_in_source_some_words")


def probability_score(p: float, flag_below: float, trust_from: float) -> float:
    """The score of a verifier probability: a monotone map of it onto the bands' thirds of [0, 1]
    (flagged [0, 1/3), review [1/3, 2/3), trusted [2/3, 1]), so that the score's band is the
    probability's band and sorting by score sorts by probability."""
    p = min(max(p, 0.0), 1.0)
    if p < flag_below:
        return _BAND_START["flagged"] + min(p / flag_below, 0.999) / 3.0
    if p < trust_from:
        return _BAND_START["review"] + min((p - flag_below) / (trust_from - flag_below), 0.999) / 3.0
    return _BAND_START["trusted"] + min((p - trust_from) / max(1e-12, 1.0 - trust_from), 0.999) / 3.0


def decide_verified(
    verdict: Verdict,
    ev: Evidence | None,
    flag_below: float,
    trust_from: float,
    *,
    restates_question: bool = False,
    upstream: Sequence[Upstream] = (),
) -> Decision:
    """The verifier decides: the band is the interval its probability lies in, the score a monotone
    map of it (:func:`groundlens_core.verifier.probability_score`). The findings explain the band and
    never contradict it: only a failed finding in a sentence the verifier itself doubts (below the
    trusted edge; below the flagged edge when the response is flagged) is named, so a fact the
    verifier judges supported is never the reason a step is flagged, and a trusted step names none.
    Two cases are decided without it: a response that embeds exactly like its question
    (``restates_question``) answers nothing, and is flagged; a response that only says the source
    does not answer (``abstains``) claims nothing, and goes to review. The unverified outputs the
    context carries (``upstream``) cap it as every decision."""
    return _grounded_in(_own_verified(verdict, ev, flag_below, trust_from, restates_question), ev, upstream)


def _own_verified(
    verdict: Verdict, ev: Evidence | None, flag_below: float, trust_from: float, restates_question: bool
) -> Decision:
    p = verdict.probability
    band: Triage = "flagged" if p < flag_below else ("review" if p < trust_from else "trusted")
    score = probability_score(p, flag_below, trust_from)
    if restates_question:  # the response embeds like its question: nothing was answered
        return Decision("flagged", _score("flagged", p), "restates_question", probability=round(p, 4))
    if ev is not None and ev.abstains:  # it claims nothing: a person checks the source lacks it
        return Decision("review", _score("review", p), "abstains", probability=round(p, 4))
    named: tuple[FactFinding, ...] = ()
    if ev is not None and band != "trusted":
        limit = flag_below if band == "flagged" else trust_from
        doubted = [s for s in verdict.sentences if s.probability < limit]
        # a finding counts where it overlaps a doubted sentence (or window of a long one)
        named = tuple(f for f in ev.failed_facts() if any(f.start < s.end and s.start < f.end for s in doubted))
    rule = {"flagged": "verified_unsupported", "review": "verified_uncertain", "trusted": "verified_supported"}[band]
    return Decision(band, score, rule, findings=named, probability=round(p, 4))


def decide_dgi(raw: float, upstream: Sequence[Upstream] = ()) -> Decision:
    """No context: DGI is a weak signal, so it can flag or ask for review, never trust. Without
    sentence evidence, any ``upstream`` output it is given caps it."""
    return _grounded_in(_own_dgi(raw), None, upstream)


def _own_dgi(raw: float) -> Decision:
    if triage("dgi", raw) == "flagged":
        return Decision("flagged", _score("flagged", normalize("dgi", raw)), "dgi_low")
    return Decision("review", _score("review", normalize("dgi", raw)), "dgi_weak")
