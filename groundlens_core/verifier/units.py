"""What the verifier reads: one unit per response sentence, chosen with the embedding pass's states.

For each response sentence the verifier reads one short pair, as a cross-encoder does:

``[CLS] question sentence [SEP] context [SEP]``

The context part is the context's sentences nearest to that response sentence (and to the question,
when there is one), taken best first until :data:`CONTEXT_TOKENS` word pieces, then put back in the
source's order. Nearness is the cosine of the sentences' pooled states (the states the embedding
pass pools into SGI's vectors, read from it when it kept them). However long the context, the pair
is bounded; several texts passed as ``context`` are read as one list of sentences, each keeping
which text it came from (``Segment.piece``).

Training (:mod:`groundlens_core.verifier.train`) builds its units with these same functions (from
states kept as float16, so near a tie it may choose other context sentences than scoring does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from groundlens_core.embedding.tokens import token_range
from groundlens_core.evidence.sentences import split_sentences

QUESTION_TOKENS = 24  # the question's first word pieces
SENTENCE_TOKENS = 48  # a longer response sentence is read in windows of this many pieces
CONTEXT_TOKENS = 128  # the nearest context sentences, up to this many pieces
QUESTION_WEIGHT = 0.5  # how much nearness to the question counts when choosing context sentences

CLS_ID, SEP_ID = 101, 102  # the packaged model's [CLS] and [SEP] (bert-base-uncased vocabulary)


class StateSource(Protocol):
    """Gives the last hidden states of texts that fit the model window (see ``TextStates``)."""

    max_tokens: int

    def split(self, text: str, max_tokens: int | None = None) -> list[str]: ...

    def text_states(self, texts: Sequence[str]) -> list[TextStates]: ...


@dataclass(frozen=True)
class TextStates:
    """One text's pass: its word-piece ids and character offsets, with [CLS] first and [SEP] last,
    and the last hidden state of each (float32 ``[n, dim]``)."""

    ids: np.ndarray
    offsets: tuple[tuple[int, int], ...]
    states: np.ndarray


@dataclass(frozen=True)
class Segment:
    """A run of word pieces of one text: a sentence (or a window of a long one)."""

    ids: np.ndarray
    vector: np.ndarray  # normalised mean of its word pieces' states: what chooses context sentences
    start: int  # character offsets into the text it came from (a response, or a context piece)
    end: int
    piece: int = 0  # which piece of its text (a context's documents, a long text's windows)


@dataclass(frozen=True)
class Unit:
    """One response sentence and the context it is read against, as the cross-encoder's input:
    ``[CLS] question sentence [SEP] context [SEP]`` word-piece ids, with token types 0 then 1."""

    ids: np.ndarray  # int64 [n]
    type_ids: np.ndarray  # int64 [n]
    sentence: Segment
    context: tuple[Segment, ...]  # the chosen context sentences, in the source's order


def _unit_vector(rows: np.ndarray) -> np.ndarray:
    v = rows.astype(np.float64).mean(axis=0)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def _pieces_of(source: StateSource, text: str) -> list[tuple[str, int]]:
    """The text's pieces that fit the model window, each with its character offset in ``text``."""
    pieces = source.split(text) if text else []
    out: list[tuple[str, int]] = []
    at = 0
    for p in pieces or [text]:
        found = text.find(p, at)
        start = found if found >= 0 else at
        out.append((p, start))
        at = start + len(p)
    return out


def segments(source: StateSource, texts: Sequence[str], window: int | None = None) -> list[Segment]:
    """Sentences of ``texts`` (each text one piece: a document, a tool output), each as its word
    pieces' states from its own text's pass. Offsets are into the text the sentence came from; a
    sentence over ``window`` pieces is cut into windows."""
    plan: list[tuple[int, str, int]] = []  # (piece index, text of one pass, its offset in the piece)
    for i, text in enumerate(texts):
        for part, offset in _pieces_of(source, text):
            plan.append((i, part, offset))
    passes = source.text_states([p for _, p, _ in plan]) if plan else []
    out: list[Segment] = []
    for (i, part, offset), ts in zip(plan, passes):
        offs = list(ts.offsets)
        for span in split_sentences(part):
            a, b = token_range(offs, span.start, span.end)
            if b <= a:
                continue
            step = window or (b - a)
            for s in range(a, b, step):
                e = min(b, s + step)
                rows = ts.states[s:e]
                out.append(
                    Segment(
                        ids=ts.ids[s:e],
                        vector=_unit_vector(rows),
                        start=offset + (offs[s][0] if s > a else span.start),
                        end=offset + (offs[e - 1][1] if e < b else span.end),
                        piece=i,
                    )
                )
    return out


def question_segment(source: StateSource, question: str | None) -> Segment | None:
    """The question's first :data:`QUESTION_TOKENS` word pieces (None without a question)."""
    if not question:
        return None
    part = _pieces_of(source, question)[0][0]
    ts = source.text_states([part])[0]
    n = min(len(ts.ids) - 1, 1 + QUESTION_TOKENS)
    if n <= 1:
        return None
    rows = ts.states[1:n]
    return Segment(ids=ts.ids[1:n], vector=_unit_vector(rows), start=0, end=len(part))


def choose_context(
    sentence: Segment, question: Segment | None, context: Sequence[Segment], budget: int = CONTEXT_TOKENS
) -> tuple[Segment, ...]:
    """The context sentences nearest to ``sentence`` (and the question), best first until ``budget``
    word pieces, returned in the source's order. Ties keep the source's order, so the choice depends
    on the texts alone."""
    if not context:
        return ()
    near = np.array([float(c.vector @ sentence.vector) for c in context])
    if question is not None:
        near = near + QUESTION_WEIGHT * np.array([float(c.vector @ question.vector) for c in context])
    order = sorted(range(len(context)), key=lambda j: (-round(float(near[j]), 9), j))
    chosen: list[int] = []
    used = 0
    for j in order:
        n = len(context[j].ids)
        if used + n > budget:
            if not chosen:  # the nearest sentence alone is longer than the budget: its first pieces
                chosen.append(j)
                used = budget
            continue
        chosen.append(j)
        used += n
        if used >= budget:
            break
    return tuple(context[j] for j in sorted(chosen))


def build_unit(sentence: Segment, question: Segment | None, context: Sequence[Segment]) -> Unit:
    """One unit: the question's and the sentence's word pieces, then the chosen context's. The ids
    are the ones the embedding pass read (word pieces do not depend on their neighbours), so no
    text is tokenized twice."""
    chosen = choose_context(sentence, question, context)
    first = [question.ids] if question is not None else []
    first.append(sentence.ids)
    a = np.concatenate(first)
    b = np.concatenate([c.ids for c in chosen])[:CONTEXT_TOKENS] if chosen else np.zeros(0, dtype=np.int64)
    ids = np.concatenate([[CLS_ID], a, [SEP_ID], b, [SEP_ID]]).astype(np.int64)
    types = np.concatenate([np.zeros(len(a) + 2, dtype=np.int64), np.ones(len(b) + 1, dtype=np.int64)])
    return Unit(ids=ids, type_ids=types, sentence=sentence, context=chosen)


def build_units(source: StateSource, question: str | None, response: str, context: Sequence[str]) -> list[Unit]:
    """Every unit of one response: one per response sentence (or window of a long one)."""
    q = question_segment(source, question)
    ctx = segments(source, list(context))
    return [build_unit(s, q, ctx) for s in segments(source, [response], window=SENTENCE_TOKENS)]
