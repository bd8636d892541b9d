"""Specific facts: extraction and normalisation, the check against the context, and the band they decide."""

import csv
import os
from pathlib import Path

import pytest

import groundlens_core as gl
from groundlens_core.evidence.factcheck import check_facts, context_facts
from groundlens_core.evidence.facts import extract_facts
from groundlens_core.evidence.passages import plan_evidence
from groundlens_core.scoring.decision import SCORE_EDGES, band_of_score

POLICY = (
    "Opened electronics can be returned within 14 days and are subject to a 15% restocking fee. "
    "Unopened items can be returned within 30 days for a full refund. "
    "Refunds are issued to the original payment method within 5 business days of receiving the return. "
    "Express delivery costs 12 euros and arrives the next business day. "
    "Batteries are covered for 6 months, while the device itself has a 24-month warranty."
)
Q = "What is the returns policy for opened electronics?"


def facts_of(text):
    return [(f.dim, f.value) for f in extract_facts(text)]


@pytest.mark.parametrize(
    "a, b",
    [
        ("two weeks", "14 days"),
        ("24 months", "2 years"),
        ("$12", "12 dollars"),
        ("\u20ac5,000", "5,000 euros"),
        ("15%", "15 percent"),
        ("15 per cent", "fifteen percent"),
        ("2 kg", "2,000 grams"),
        ("9:30 am", "half past nine in the morning"),
        ("3 pm", "three in the afternoon"),
        ("noon", "12:00 pm"),
        ("30 April", "April 30"),
        ("forty-eight hours", "2 days"),
        ("\u00a39.50", "nine pounds fifty"),
        ("13.5p", "\u00a30.135"),
        ("a week", "7 days"),
        ("half a year", "6 months"),
        ("$1.5 million", "$1,500,000"),
    ],
)
def test_the_same_fact_written_two_ways_normalises_to_one_value(a, b):
    fa, fb = facts_of(f"It is {a} here."), facts_of(f"It is {b} here.")
    assert fa and fa == fb


def test_number_words_rates_and_labels():
    assert facts_of("Renewed twice, a dozen eggs.") == [("count", 2.0), ("count", 12.0)]
    assert facts_of("It costs \u00a32.60 a day.") == [("money:GBP", 2.6)]  # "a day" is a rate, not a duration
    assert facts_of("Pupils in Year 4 eat free.") == [("label", "year 4")]
    assert facts_of("one of the options") == []  # a lone "one" is no fact
    assert ("name", "volta world pass") in facts_of("Buy a Volta World Pass add-on.")


def check(response, context=POLICY):
    plan = plan_evidence(response, context)
    return check_facts(plan.response_spans, context_facts(context, plan.context_spans))


def test_a_changed_number_is_contradicted_and_named_with_what_the_source_says():
    (fee,) = [f for f in check("Opened electronics are subject to a 25% restocking fee.") if f.kind == "percent"]
    assert fee.status == "contradicted" and fee.describe() == "25% \u2014 the source says 15%"


def test_a_number_the_source_gives_for_something_else_is_not_support():
    days = [f for f in check("Opened electronics can be returned within 30 days.") if f.kind == "duration"]
    assert [(f.text, f.status, f.source) for f in days] == [("at most 30 days", "contradicted", "at most 14 days")]
    battery = [f for f in check("Batteries are covered for 24 months.") if f.kind == "month"]
    assert battery[0].status == "contradicted" and battery[0].source == "6 months"


def test_a_value_with_an_incompatible_unit_is_not_support():
    (f,) = [f for f in check("You can return it within 12 days.", "Express delivery costs 12 euros.") if f.kind != "claim"]
    assert f.kind == "duration" and f.status == "unsupported" and f.describe() == "12 days \u2014 not in the source"


def test_paraphrased_facts_are_supported():
    for response in (
        "Opened electronics like a laptop may be sent back within two weeks, but a 15 percent restocking fee applies.",
        "Your refund goes back to the card you paid with, usually within five business days.",
        "Express shipping is twelve euros and gets there the next working day.",
        "The battery warranty lasts half a year, and the device is covered for two years.",
    ):
        found = check(response)
        assert found and all(f.status == "supported" for f in found), (response, found)


def test_a_qualified_value_is_borne_out_by_the_source():
    ctx = "The film grossed $181,674,817 worldwide on a budget of $160 million."
    assert all(f.status == "supported" for f in check("It grossed more than $180 million.", ctx))
    assert [f.status for f in check("It grossed less than $100 million.", ctx)] == ["contradicted"]


def test_words_rank_facts_flag():
    wrong = gl.evaluate(Q, "Opened electronics can be returned within 14 days and are subject to a 25% restocking fee.", POLICY)
    paraphrase = gl.evaluate(
        Q, "Opened electronics like a laptop may be sent back within two weeks, but a 15 percent restocking fee applies.", POLICY
    )
    copy = gl.evaluate(Q, "Opened electronics can be returned within 14 days and are subject to a 15% restocking fee.", POLICY)
    assert wrong.triage == "flagged" and "25% \u2014 the source says 15%" in wrong.explanation.split(" SGI ")[0]
    assert paraphrase.triage == "review"  # word choice alone never flags
    assert copy.triage == "trusted"
    assert wrong.score < SCORE_EDGES[0] <= paraphrase.score < SCORE_EDGES[1] <= copy.score
    for res in (wrong, paraphrase, copy):
        assert band_of_score(res.score) == res.triage and res.explanation.startswith(f"Score {res.score:.2f}, {res.triage}:")


def test_without_context_a_step_is_never_trusted():
    res = gl.evaluate("What is the capital of France?", "The capital of France is Paris, a city on the Seine.")
    assert res.method == "dgi" and res.triage in ("flagged", "review") and "no context" in res.explanation


def test_redaction_removes_fact_texts_from_the_score():
    from groundlens_core.scoring.results import redact_score_dict

    res = gl.evaluate(Q, "Opened electronics are subject to a 25% restocking fee.", POLICY)
    red = redact_score_dict(res.to_dict())
    assert "25%" not in red["explanation"] and all(f["text"] == "[redacted]" for f in red["evidence"]["facts"])
    assert not any("15%" in str(f["source"]) for f in red["evidence"]["facts"])


CLAIMS = Path(os.environ.get("GROUNDLENS_SHARED_DATA", "")) / "claims_dev.csv"


@pytest.mark.skipif(not CLAIMS.is_file(), reason="claims_dev.csv: set GROUNDLENS_SHARED_DATA (the Makefile does)")
def test_claim_set_wrong_facts_flagged_paraphrases_not_and_no_flagged_row_above_a_trusted_one():
    rows = list(csv.DictReader(CLAIMS.open(encoding="utf-8")))
    res = gl.evaluate_batch([{k: r[k] for k in ("question", "response", "context")} for r in rows])
    wrong = [x.flagged for r, x in zip(rows, res) if r["label"] == "0"]
    right = [x.flagged for r, x in zip(rows, res) if r["label"] == "1"]
    assert sum(wrong) / len(wrong) >= 0.85 and sum(right) / len(right) <= 0.15
    flagged = [x.score for x in res if x.triage == "flagged"]
    trusted = [x.score for x in res if x.triage == "trusted"]
    assert not trusted or max(flagged) < min(trusted)


def test_a_copied_clause_with_its_polarity_flipped_is_contradicted():
    ctx = "Booster vaccinations given before the previous one expires do not need a new wait."
    (flip,) = check("Booster vaccinations given before the previous one expires also need a new wait.", ctx)
    assert flip.kind == "polarity" and flip.status == "contradicted" and flip.source.startswith("Booster")
    # a bound is no negation, and a paraphrase that shares few words is left to the other signals
    assert check("Hand in the form no later than the day before booster vaccinations expire.", ctx) == ()
    assert check("A booster given in time needs no fresh wait.", ctx) == ()


def test_text_with_no_letter_or_digit_is_not_scored():
    with pytest.raises(gl.GroundlensInputError, match="no letter or digit"):
        gl.evaluate("What happened?", "\U0001F525", "\U0001F389\U0001F389")
    # a context of emoji alone is no context: DGI, a weak signal, never SGI 10.0 trusted
    assert gl.evaluate("What happened at the party?", "There was a party.", "\U0001F389\U0001F389").method == "dgi"


@pytest.mark.parametrize(
    "context, wrong",
    [
        ("Checked bags must weigh no more than 23 kg.", "Checked bags must weigh more than 23 kg."),
        ("Drivers must be at least 23 years old.", "Drivers must be at most 23 years old."),
        ("Orders over \u00a350 ship free.", "Orders under \u00a350 ship free."),
        ("Car hire costs $18 per day, capped at $180 per rental.", "Car hire costs $18 per rental."),
        ("The plan costs \u20ac25 a month.", "The plan costs \u20ac25 a year."),
        ("The helpline is open from 9:30 to 5:30 pm on weekdays.", "The helpline opens at 9:30 pm."),
        ("The shop reopens on 3 May after the works.", "The shop reopens on the 3rd of June after the works."),
    ],
)
def test_a_bound_a_rate_or_a_date_turned_the_other_way_is_contradicted(context, wrong):
    res = gl.evaluate("What are the rules?", wrong, context)
    assert res.triage == "flagged" and any(f.status == "contradicted" for f in res.evidence.facts), res.evidence.facts


@pytest.mark.parametrize(
    "context, right",
    [
        ("Flexible bookings can be cancelled free of charge up to 48 hours before the arrival date.",
         "You can cancel for free as long as you do it at least 48 hours before you arrive."),
        ("The helpline is open from 9:30 to 5:30 pm on weekdays.", "The helpline opens at 9:30 am."),
        ("The shop reopens on 3 May after the works.", "The shop reopens on May 3rd after the works."),
        ("Lunch costs \u00a32.60 a day.", "Lunch is \u00a32.60 per day."),
        ("Classes run on Thursdays in Canada.", "Classes are on Thursday for Canadian members."),
    ],
)  # fmt: skip
def test_the_same_fact_in_other_words_is_supported(context, right):
    res = gl.evaluate("What are the rules?", right, context)
    assert all(f.status == "supported" for f in res.evidence.facts) and res.triage != "flagged", res.evidence.facts


@pytest.mark.parametrize(
    "text", ["Open at 25:00 pm.", "Costs 13.75 pm.", "It was 99.99 am", "1" + "0" * 400 + " May", "May " + "9" * 5000]
)
def test_odd_numbers_and_times_never_fail_the_score(text):
    res = gl.evaluate("When is it open?", text, "The shop is open from 9 am to 5 pm, and 1 May is a holiday.")
    assert res.method == "sgi" and res.triage in ("flagged", "review", "trusted")


def test_fact_anchors_are_linear_in_a_long_sentence():
    from groundlens_core.evidence.factcheck import _anchors

    def count_facts(n):
        text = " ".join(f"item {i} costs ${i}.50 per day, and Zone {i} opens at {i % 12 + 1} pm" for i in range(n))
        facts = extract_facts(text)
        return len(facts), sum(len(a) for a in _anchors(text, 0, facts))

    small, big = count_facts(50), count_facts(400)
    # every fact reads only the clauses near it: the words counted grow with the facts, not their square
    assert big[1] <= 9 * small[1] * big[0] / small[0] / 8


def test_sorted_by_the_score_wrong_facts_come_first_and_correct_paraphrases_are_not_flagged():
    items = [
        ("How much is express delivery?", "Express delivery costs 20 euros.", False),
        ("How much is express delivery?", "Express shipping is twelve euros and gets there the next working day.", True),
        ("Can I return an opened laptop?", "Opened electronics can be returned within 14 days and are subject to a 25% restocking fee.", False),
        ("Can I return an opened laptop?", "Opened electronics like a laptop may be sent back within two weeks, but a 15 percent restocking fee applies.", True),
        ("When do I get my refund?", "Your refund goes back to the card you paid with, usually within five business days.", True),
        ("Can I return an opened laptop?", "Opened electronics can be returned within 30 days and are subject to a 15% restocking fee.", False),
    ]
    res = gl.evaluate_batch([{"question": q, "response": r, "context": POLICY} for q, r, _ in items])
    ranked = sorted(zip(res, items), key=lambda p: p[0].score)
    assert [ok for _, (_, _, ok) in ranked] == [False] * 3 + [True] * 3  # every wrong answer ranks first
    assert all(x.triage == "flagged" for x, (_, _, ok) in ranked if not ok)
    assert all(x.triage != "flagged" for x, (_, _, ok) in ranked if ok)
