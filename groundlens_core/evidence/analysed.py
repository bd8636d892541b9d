"""One analysed text: a response or a context split into sentences once, each sentence tokenised once.

Why: scoring one response reads its sentences, and its context's, in several checks: the word
support (:mod:`.passages`), the facts and the words that anchor them (:mod:`.factcheck`), the
copied-sentence alignment (:mod:`.copied`, through :mod:`.claims`) and abstentions
(:mod:`.abstention`). Each check splitting and tokenising the text on its own repeats the same work.
An :class:`AnalysedText` is made once per distinct text in the scoring path and handed down. Its
sentences are text spans (:class:`~.sentences.TextSpan`), so a check that takes spans takes them
unchanged; what a sentence gives each tokeniser is computed on first use and kept
(:func:`functools.cached_property`), so a check that does not run costs nothing.

Every cached value is exactly what the check computed on its own, so sharing changes no result. A
plain :class:`~.sentences.TextSpan` from another caller still works: :func:`analysed` wraps it for
the duration of the call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from groundlens_core.evidence.abstention import abstains as _abstains
from groundlens_core.evidence.content import ContentToken
from groundlens_core.evidence.content import content_tokens as _content_tokens
from groundlens_core.evidence.facts import Fact, extract_facts
from groundlens_core.evidence.sentences import TextSpan, split_sentences

__all__ = ["AnalysedSentence", "AnalysedText", "CopyToken", "analyse", "analysed", "copy_tokens_of"]

#: a word of the copied-sentence alignment: letters and digits with one inner apostrophe, and a
#: number with its separators ("1,500", "3.5", "10:30") as one word
_COPY_WORD = re.compile(r"\w+(?:['\u2019]\w+)?(?:[.,:]\d+)*")

#: a word of the copied-sentence alignment and its ``[start, end)`` in its sentence
CopyToken = tuple[str, int, int]


def copy_tokens_of(text: str) -> tuple[CopyToken, ...]:
    """The words of ``text`` as the copied-sentence alignment (:mod:`.copied`) reads them."""
    return tuple((m.group(0), m.start(), m.end()) for m in _COPY_WORD.finditer(text))


@dataclass(frozen=True, eq=False)
class AnalysedSentence(TextSpan):
    """A sentence of an analysed text: its span, and what each tokeniser makes of it, on first use.

    The tokens' offsets are into the sentence, as each tokeniser gives them for the sentence alone;
    the facts' are into the whole text (``start`` added), as the fact checks report them. It equals
    (and hashes as) the plain span it analyses: what it adds is derived from the span."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextSpan):
            return (self.start, self.end, self.text) == (other.start, other.end, other.text)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.start, self.end, self.text))

    @cached_property
    def content_tokens(self) -> tuple[ContentToken, ...]:
        """Its content tokens (:func:`~.content.content_tokens`): the word support and the facts'
        anchors read the same ones."""
        return tuple(_content_tokens(self.text))

    @cached_property
    def names(self) -> frozenset[str]:
        """The keys of the names it writes (capitalised words inside it): what says whose a value is."""
        return frozenset(t.key for t in self.content_tokens if t.kind == "name")

    @cached_property
    def facts(self) -> tuple[Fact, ...]:
        """Its facts (:func:`~.facts.extract_facts`), offsets into the whole text."""
        return tuple(extract_facts(self.text, self.start))

    @cached_property
    def copy_tokens(self) -> tuple[CopyToken, ...]:
        """Its words as the copied-sentence alignment reads them (:func:`copy_tokens_of`)."""
        return copy_tokens_of(self.text)

    @cached_property
    def copy_words(self) -> tuple[str, ...]:
        """Its alignment words lower-cased: what the alignment indexes and compares."""
        return tuple(w.lower() for w, _, _ in self.copy_tokens)

    @cached_property
    def abstains(self) -> bool:
        """Whether it says the source does not answer (:func:`~.abstention.abstains`)."""
        return _abstains(self.text)


def analysed(span: TextSpan | str) -> AnalysedSentence:
    """``span`` when it is analysed already; else a new analysed sentence over it (a plain text: the
    whole text as one sentence), whose cache lasts as long as the caller keeps it."""
    if isinstance(span, AnalysedSentence):
        return span
    if isinstance(span, str):
        return AnalysedSentence(0, len(span), span)
    return AnalysedSentence(span.start, span.end, span.text)


@dataclass(frozen=True)
class AnalysedText:
    """A response or a context split into sentences once (:func:`analyse`), with offsets into ``text``."""

    text: str
    sentences: tuple[AnalysedSentence, ...]


def analyse(text: str | AnalysedText) -> AnalysedText:
    """``text`` split into sentences (:func:`~.sentences.split_sentences`); a text none of whose
    pieces has a letter or digit (only emoji, say) is one sentence, so every text has one to align.
    An analysed text is returned as it is."""
    if isinstance(text, AnalysedText):
        return text
    spans = split_sentences(text)
    if not spans:
        stripped = text.strip()
        start = text.find(stripped)
        return AnalysedText(text, (AnalysedSentence(start, start + len(stripped), stripped),))
    return AnalysedText(text, tuple(AnalysedSentence(s.start, s.end, s.text) for s in spans))
