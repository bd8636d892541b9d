"""An answer that says the source does not answer: no claim to check, sent to review, never flagged
for naming the topic it could not find; a sentence that goes on to assert is checked as any other."""

from __future__ import annotations

import json

import pytest

from groundlens_core import evaluate
from groundlens_core.evidence.abstention import abstains
from groundlens_core.scoring.results import as_score, score_from_dict

NOTICE = (
    "The museum is closed on Mondays. On other days it opens at 10:00 and closes at 18:00. "
    "Tickets cost 12 euros; children under 12 enter free."
)


@pytest.mark.parametrize(
    "sentence",
    [
        "The document does not say whether there is parking.",
        "Unfortunately, the text doesn't specify a student discount.",
        "There is no information about parking in the provided context.",
        "The audio guide price is not mentioned in the document.",
        "I couldn't find the Wi-Fi password in the source.",
        "I can't find that in the document; it does not say how to book a group visit.",
        "It is not clear from the document whether dogs are allowed.",
        "According to the document, there is no mention of a cloakroom.",
        "The document doesn\u2019t say whether there is coach parking.",  # the apostrophe most models write
        "The document does not give the price of the audio guide.",
        "No details are given about the refund.",
        "The document does not mention the price and the opening hours.",
        "The document does not say whether parking and the cafe are free.",
        "The context does not provide parking information.",
        "I'm sorry, but the document does not include any pricing for parking.",
        "There is no reference to parking fees in the document.",
    ],
)
def test_sentences_that_say_the_source_does_not_answer(sentence):
    assert abstains(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "The document does not mention a fee, so there is none.",
        "The ticket costs 12 euros and the audio guide is not mentioned in the document.",
        "The document does not say; the fee is 20 euros.",
        "The museum does not open on Mondays.",
        "The policy does not cover flood damage.",
        "The text does not allow photography, but the guide is 5 euros.",
        "It does not include the audio guide.",
        "The document does not mention a discount and a ticket costs 20 euros.",
        "There is no data limit on the plan.",
        "No personal data is provided to third parties.",
        "There was no indication of fraud in the 2021 audit.",
        "The source does not contain lead.",
        "Your documents do not include a visa.",
        "The passage does not give access to the west wing.",
        "The ticket price given in the text does not include the audio guide.",
    ],
)
def test_sentences_that_assert_something_are_not_abstentions(sentence):
    assert not abstains(sentence)


def test_an_abstention_goes_to_review_whatever_topic_it_names():
    res = evaluate(
        "Is there parking for coaches at the museum?",
        "The document does not say whether there is coach parking at the Rijksmuseum.",
        NOTICE,
    )
    assert res.triage == "review" and res.decision.rule == "abstains"
    assert res.evidence.abstentions == (0,) and res.evidence.failed_facts() == []
    assert "does not answer" in res.explanation
    # without a question (a summary that abstains) the same
    alone = evaluate(None, "The text does not mention parking.", NOTICE)
    assert alone.triage == "review" and alone.decision.rule == "abstains"


def test_a_sentence_after_the_abstention_is_still_checked():
    res = evaluate(
        "Is there parking, and what does a ticket cost?",
        "The document does not say whether there is parking. A ticket costs 15 euros.",
        NOTICE,
    )
    assert res.triage == "flagged"
    assert [f.text for f in res.evidence.failed_facts()] == ["15 euros"]
    assert res.evidence.abstentions == (0,)
    # an abstention that goes on to infer is no abstention: its claim is checked
    inferred = evaluate("Is there parking?", "The document does not mention parking, so there is none.", NOTICE)
    assert inferred.decision.rule != "abstains" and inferred.evidence.abstentions == ()


def test_the_abstentions_survive_a_saved_score_and_a_wrong_type_is_a_clear_error():
    res = evaluate("Is there parking?", "The document does not say whether there is parking.", NOTICE)
    back = score_from_dict(json.loads(res.to_json()))
    assert back.evidence.abstentions == (0,) and back.evidence.abstains
    for marks in (["first"], [0, 0], [5], [-1]):  # not an index, twice the same, past the sentences
        bad = json.loads(res.to_json())
        bad["evidence"]["abstentions"] = marks
        with pytest.raises(ValueError, match="abstentions"):
            as_score(bad, checked=True)
    saved = json.loads(res.to_json())
    saved["evidence"]["abstentions"] = None  # an older or hand-built score: none
    assert as_score(saved).evidence.abstentions == ()
