"""Sentence-level evidence: for each response sentence, its best context passage and what the context lacks.

The response and the context are split by one splitter (:mod:`groundlens_core.evidence.sentences`). Each
response sentence gets:

- its best-supporting passage: the context sentence with the highest cosine similarity of their
  embeddings (the same model as SGI; each sentence is the mean of its word pieces' states in the
  whole response's or context's pass, so aligning costs no model work beyond the texts SGI embeds;
  batch invariant and deterministic);
- its unsupported content: the numbers, dates, names and content words it states that the context
  does not contain (:mod:`groundlens_core.evidence.content`);
- its support: the share of its content tokens the context contains.

The response's **support** is the share of all its content tokens the context contains; the
**weakest sentence** is the one stating the most the context lacks (ties: the one least similar to
its best passage, then the earlier one).

Why token coverage and not embedding similarity drives the support value: on both dev sets the
similarity of a sentence to its best passage ranked hallucinated responses *worse* than chance or
barely above it (HaluEval QA 0.35, FaithBench 0.55: the short correct answers are less similar to any
full context sentence than fluent wrong ones), while coverage ranked them at 0.93 and 0.67 (README,
"Measured quality"). Similarity stays in the evidence, for the reviewer and as the tie-break.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from groundlens_core.evidence.analysed import AnalysedText, analyse, analysed
from groundlens_core.evidence.content import ContentToken, source_keys
from groundlens_core.evidence.factcheck import ContextFacts, check_facts, context_facts
from groundlens_core.evidence.sentences import TextSpan
from groundlens_core.scoring.results import Evidence, SentenceEvidence, UnsupportedToken

__all__ = ["EvidencePlan", "plan_evidence", "build_evidence", "context_keys", "plan_context_facts", "locate_passages"]


@dataclass(frozen=True)
class EvidencePlan:
    """The sentences to embed for one (response, context)."""

    response: str
    context: str
    response_spans: tuple[TextSpan, ...]
    context_spans: tuple[TextSpan, ...]

    def texts(self) -> list[str]:
        return [s.text for s in self.response_spans] + [s.text for s in self.context_spans]

    def span_requests(self) -> dict[str, list[tuple[int, int]]]:
        """The sentences as character spans of the response and of the context (what
        :func:`build_evidence` looks up), for one encode of the two whole texts."""
        out = {self.response: [(s.start, s.end) for s in self.response_spans]}
        out.setdefault(self.context, []).extend((s.start, s.end) for s in self.context_spans)
        return out


def plan_evidence(response: str | AnalysedText, context: str | AnalysedText) -> EvidencePlan:
    """The sentences of the response and of the context. Given analysed texts (:func:`~.analysed.analyse`,
    made once per text by the scoring path), their sentences are used as they are, so every check
    reading the plan shares their tokens; given plain texts, they are split here."""
    r, c = analyse(response), analyse(context)
    return EvidencePlan(r.text, c.text, r.sentences, c.sentences)


def context_keys(context: str | AnalysedText) -> frozenset[str]:
    """Every key the context supplies (:func:`~.content.source_keys`), read from the whole text rather
    than from its sentences: what lies between them (a list item's number) supplies keys too."""
    return source_keys(context.text if isinstance(context, AnalysedText) else context)


def plan_context_facts(plan: EvidencePlan) -> ContextFacts:
    """The context's facts (amounts, durations, dates, names ... with their anchors), once per context."""
    return context_facts(plan.context, plan.context_spans)


def _sentence_evidence(
    span: TextSpan,
    tokens: Sequence[ContentToken],
    passage: TextSpan,
    similarity: float,
    keys: frozenset[str],
    covered: Sequence[tuple[int, int]],
) -> SentenceEvidence:
    """One response sentence's evidence: the content ``tokens`` the context's ``keys`` lack and no
    supported fact ``covered``, and its best passage. The tokens' offsets are into the sentence (as
    its analysed sentence keeps them); the evidence's are into the response."""
    at = span.start
    absent = tuple(
        UnsupportedToken(t.text, t.kind, t.start + at, t.end + at)
        for t in tokens
        if t.key not in keys and not any(a <= t.start + at and t.end + at <= b for a, b in covered)
    )
    return SentenceEvidence(
        start=span.start,
        end=span.end,
        text=span.text,
        support=1.0 - len(absent) / len(tokens) if tokens else 1.0,
        content_tokens=len(tokens),
        unsupported=absent,
        similarity=similarity,
        passage_start=passage.start,
        passage_end=passage.end,
        passage=passage.text,
    )


def build_evidence(
    plan: EvidencePlan,
    vectors: Mapping[tuple[str, int, int], np.ndarray],
    keys: frozenset[str] | None = None,
    facts: ContextFacts | None = None,
    question: str | None = None,
) -> Evidence:
    """Evidence from the plan and the embedding of each planned sentence: ``vectors[(text, start,
    end)]``, unit rows, keyed by the response or context and the sentence's offsets in it (pooled
    from the whole text's pass: :func:`~groundlens_core.embedding.plan.embed_with_spans`)."""
    keys = context_keys(plan.context) if keys is None else keys
    facts = plan_context_facts(plan) if facts is None else facts
    ctx = np.stack([np.asarray(vectors[(plan.context, s.start, s.end)], dtype=np.float64) for s in plan.context_spans])
    # a sentence saying the source does not answer names the question's topic, which is no claim
    spans = [analysed(span) for span in plan.response_spans]
    abstaining = tuple(i for i, span in enumerate(spans) if span.abstains)
    checked = tuple(f for f in check_facts(spans, facts, question) if f.sentence not in abstaining)
    # a word inside a fact the source supports ("two weeks" for "14 days") is not missing from it
    covered = [(f.start, f.end) for f in checked if f.status == "supported"]
    sentences: list[SentenceEvidence] = []
    for i, span in enumerate(spans):
        sims = ctx @ np.asarray(vectors[(plan.response, span.start, span.end)], dtype=np.float64)
        best = int(np.argmax(sims))
        tokens = () if i in abstaining else span.content_tokens
        sentences.append(_sentence_evidence(span, tokens, plan.context_spans[best], float(sims[best]), keys, covered))
    total = sum(s.content_tokens for s in sentences)
    absent_total = sum(len(s.unsupported) for s in sentences)
    candidates = [i for i, s in enumerate(sentences) if s.unsupported]
    weakest = (
        min(candidates, key=lambda i: (-len(sentences[i].unsupported), sentences[i].similarity, i))
        if candidates
        else None
    )
    return Evidence(
        support=1.0 - absent_total / total if total else 1.0,
        content_tokens=total,
        unsupported_tokens=absent_total,
        weakest=weakest,
        sentences=tuple(sentences),
        context_passages=len(plan.context_spans),
        facts=checked,
        abstentions=abstaining,
    )


def locate_passages(evidence: Evidence, pieces: Sequence[tuple[int, int, int]] | None) -> Evidence:
    """``evidence`` with each sentence's ``passage_piece``: the caller's index of the context piece
    its best passage starts in, given where each kept piece lies in the joined context (``pieces``:
    (index, start, end), in order; see ``groundlens_core.scoring.join_context_pieces``). Unchanged
    without pieces (a context given as one text), so such a score reads as before. Why: the passage
    offsets index the joined text, which no caller keeps; the piece is what names the tool or
    document the passage came from."""
    if not pieces:
        return evidence
    starts = [start for _, start, _ in pieces]
    sentences = tuple(
        replace(s, passage_piece=pieces[max(0, bisect_right(starts, s.passage_start) - 1)][0])
        for s in evidence.sentences
    )
    return replace(evidence, sentences=sentences)
