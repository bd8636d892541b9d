"""One analysed text per response and per context: scoring splits each into sentences once, and the
analysed text's sentences and tokens are exactly what the splitter and the tokenisers give."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Callable

import pytest

import groundlens_core as gl
from groundlens_core.evidence import sentences as sentences_module
from groundlens_core.evidence.analysed import AnalysedSentence, analyse, analysed
from groundlens_core.evidence.content import content_tokens
from groundlens_core.evidence.factcheck import check_facts, context_facts
from groundlens_core.evidence.facts import extract_facts
from groundlens_core.evidence.sentences import TextSpan, split_sentences

QUESTION = "How much did the film gross, and who directed it?"
CONTEXT = (
    "Poseidon (film) . Poseidon grossed $ 181,674,817 at the worldwide box office on a budget of $ 160 million . "
    "The film was directed by Wolfgang Petersen. It opened on May 12, 2006."
)
RESPONSE = (
    'The film "Poseidon", directed by Wolfgang Petersen, grossed $181,674,817 worldwide. '
    "It won three Academy Awards in 2007. The document does not say who produced it."
)
TEXTS = [
    CONTEXT,
    RESPONSE,
    "Dr. Smith paid $1.5 million on Jan. 5, 2020. He left! Then J. K. Rowling wrote it.",
    "Summary:\n1. The film grossed $181,674,817.\n2. Budget was $160 million.\n- a bullet\n* another one",
    "Heading\nBody text starts here.\r\n\r\nNew paragraph",
]


@pytest.fixture(scope="module")
def emb():
    return gl.get_embedder()


@pytest.fixture
def splits(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each text is split into sentences: every module holding the splitter calls a counting
    wrapper instead, so a split anywhere in scoring is seen, whichever module makes it."""
    monkeypatch.setenv("GROUNDLENS_VERIFIER", "off")  # the verifier reads sentences of its own
    seen: Counter[str] = Counter()
    original = sentences_module.split_sentences

    def counting(text: str) -> list[TextSpan]:
        seen[text] += 1
        return original(text)

    for name, module in list(sys.modules.items()):
        if name.startswith("groundlens_core") and getattr(module, "split_sentences", None) is original:
            monkeypatch.setattr(module, "split_sentences", counting)
    return seen


def test_one_evaluate_splits_the_response_and_the_context_once_each(emb, splits: Counter[str]) -> None:
    result = gl.evaluate(QUESTION, RESPONSE, CONTEXT, embedder=emb)
    assert result.evidence is not None and result.evidence.facts
    assert dict(splits) == {RESPONSE: 1, CONTEXT: 1}


def test_a_batch_splits_a_context_its_rows_share_once(emb, splits: Counter[str]) -> None:
    other = "Poseidon grossed $181,674,817 on a budget of $160 million."
    rows = [(QUESTION, RESPONSE, CONTEXT), (QUESTION, other, CONTEXT), (None, other, CONTEXT)]
    results = gl.evaluate_batch(rows, embedder=emb, errors="raise")
    assert all(r.evidence is not None for r in results)
    assert dict(splits) == {RESPONSE: 1, other: 1, CONTEXT: 1}


@pytest.mark.parametrize("text", TEXTS)
def test_the_analysed_text_has_the_splitters_sentences_and_offsets(text: str) -> None:
    done = analyse(text)
    assert done.text == text
    assert [(s.start, s.end, s.text) for s in done.sentences] == [
        (s.start, s.end, s.text) for s in split_sentences(text)
    ]
    assert all(text[s.start : s.end] == s.text for s in done.sentences)
    assert analyse(done) is done
    # an analysed sentence equals, and hashes as, the plain span it analyses
    if done.sentences and split_sentences(text):
        assert list(done.sentences) == list(split_sentences(text))
        assert {*done.sentences, *split_sentences(text)} == set(done.sentences)


def test_a_text_without_a_sentence_is_one_sentence() -> None:
    (only,) = analyse("  \U0001f389\U0001f389 ").sentences
    assert (only.start, only.end, only.text) == (2, 4, "\U0001f389\U0001f389")


@pytest.mark.parametrize("text", TEXTS)
def test_each_sentence_keeps_what_the_tokenisers_give(text: str) -> None:
    for s in analyse(text).sentences:
        assert list(s.content_tokens) == content_tokens(s.text)
        assert list(s.facts) == extract_facts(s.text, s.start)
        assert s.names == frozenset(t.key for t in content_tokens(s.text) if t.kind == "name")
        assert s.content_tokens is s.content_tokens  # computed once, then kept


def _plain(spans: tuple[AnalysedSentence, ...]) -> list[TextSpan]:
    return [TextSpan(s.start, s.end, s.text) for s in spans]


@pytest.mark.parametrize("wrap", [_plain, list], ids=["plain spans", "analysed spans"])
def test_the_checks_find_the_same_with_plain_or_analysed_spans(
    wrap: Callable[[tuple[AnalysedSentence, ...]], list[TextSpan]],
) -> None:
    """Callers that split the text themselves pass plain spans; the findings must not depend on it."""
    response, context = analyse(RESPONSE), analyse(CONTEXT)
    expected = check_facts(_plain(response.sentences), context_facts(CONTEXT, _plain(context.sentences)), QUESTION)
    found = check_facts(wrap(response.sentences), context_facts(CONTEXT, wrap(context.sentences)), QUESTION)
    assert found == expected and expected


def test_a_plain_span_or_text_is_analysed_on_the_spot() -> None:
    span = TextSpan(4, 9, "Hello")
    assert (analysed(span).start, analysed(span).text) == (4, "Hello")
    assert analysed("Hi there").copy_words == ("hi", "there")
    sentence = analyse(RESPONSE).sentences[0]
    assert analysed(sentence) is sentence
