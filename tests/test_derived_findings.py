"""Findings on answers written the way an assistant writes: values worked out from the source's
values, a value judged only by the slot it fills, a condition only from the clause it restricts,
copied clauses, and the errors that must still be caught."""

from __future__ import annotations

import pytest

from groundlens_core import evaluate


def _facts(question, response, context):
    return evaluate(question, response, context).evidence.facts


def _status(question, response, context, text):
    found = [f for f in _facts(question, response, context) if text in f.text]
    assert found, [f.text for f in _facts(question, response, context)]
    return found[0].status, found[0].source


def _failed(question, response, context):
    return [f.describe() for f in _facts(question, response, context) if f.failed]


# ---------------------------------------------------------------- derived values are supported


@pytest.mark.parametrize(
    "context, response, value",
    [
        # a difference
        ("We captured €80 on your card. €30 has already been refunded to you.",
         "€80 was captured and €30 already refunded, so €50 is left.", "€50"),
        # a rate times a quantity
        ("The dose is 25 mg/kg. Your child weighs 18 kg.", "At 25 mg/kg × 18 kg = 450 mg.", "450 mg"),
        ("Bike hire costs $18 per day.", "For a 3-day trip that comes to $54 in total.", "$54"),
        # a sum of a list
        ("The flight costs £120. The hotel costs £85. The transfer costs £15.",
         "Altogether that is £220: £120 for the flight, £85 for the hotel and £15 for the transfer.", "£220"),
        # a percentage of an amount
        ("The jacket costs €200. Members get a 15% discount.", "With the 15% discount you save €30.", "€30"),
        # a share
        ("Of the 40 applicants, 10 were accepted.", "So 25% of applicants were accepted.", "25%"),
        # a rate per another unit of time
        ("The plan costs £12 a month.", "That works out to £144 a year.", "£144"),
        # a difference, worded as one
        ("The old trial lasted 14 days. The new trial lasts 12.2 days.",
         "The new trial is about 1.8 fewer days than the old one.", "1.8"),
        # the time between two clock times
        ("The office opens at 09:00 and closes at 17:30.", "So it is open for 8.5 hours a day.", "8.5 hours"),
    ],
)  # fmt: skip
def test_a_value_worked_out_from_the_source_is_supported_with_its_working(context, response, value):
    status, working = _status("What does it come to?", response, context, value)
    assert status == "supported" and working


@pytest.mark.parametrize(
    "context, response",
    [
        # a wrong result of the same working
        ("We captured €80 on your card. €30 has already been refunded to you.", "So €40 is left to refund."),
        # the two ends of a range are never added
        ("Refunds arrive within 5 to 10 business days.", "So in total refunds arrive within 15 business days."),
        # no working said: a value equal to some sum stays a changed value
        ("Refunds are accepted within 14 days. Faulty items can be returned within 30 days.",
         "Refunds are accepted within 16 days."),
    ],
)  # fmt: skip
def test_a_value_no_working_gives_still_fails(context, response):
    assert _failed("What about refunds?", response, context)


def test_a_unit_conversion_is_the_same_value():
    for response in ("The timeout of 500 ms becomes 0.5 s.", "The timeout is 0.5 s."):
        assert _status("What is the timeout in seconds?", response, "The request timeout is 500 ms.", "0.5 s")[0] == (
            "supported"
        )


# ---------------------------------------------------------------- a value fills one slot


def test_a_difference_is_not_contradicted_by_an_absolute_value():
    failed = _failed("How much shorter?", "That is about 3 fewer days.", "The trial lasts 14 days.")
    assert not any("the source says" in f for f in failed)


def test_a_value_sharing_no_word_with_any_source_value_is_judged_on_its_own():
    failed = _failed("How big is it?", "It holds 608 people.", "Seven rows of seats are bolted to the floor.")
    assert failed and not any("the source says" in f for f in failed)


def test_the_same_kind_of_difference_is_still_compared():
    context = "Parents may take up to 10 further weeks of leave."
    assert _status("How much?", "You may take up to 12 further weeks of leave.", context, "12")[0] == "contradicted"


# ---------------------------------------------------------------- conditions come from their own clause


def test_a_condition_of_another_sentence_is_not_added():
    context = (
        "Water damage from a burst pipe is covered. Flooding is covered only if you buy the optional Nature add-on."
    )
    found = _facts("Is a burst pipe covered?", "Yes, water damage from a burst pipe is covered.", context)
    assert not [f for f in found if f.kind == "condition"]


def test_a_condition_of_the_same_clause_is_still_added():
    context = (
        "Water damage from a burst pipe is covered. Flooding is covered only if you buy the optional Nature add-on."
    )
    found = _facts("Is flooding covered?", "Yes, flooding is covered.", context)
    assert [f.source for f in found if f.kind == "condition"] == ["only if you buy the optional Nature add-on"]


def test_as_long_as_in_a_comparison_is_no_condition():
    context = "A landing at least as long as the stair is wide is required at the top and bottom of every flight."
    found = _facts("What is required?", "Every flight needs a landing at the top and the bottom.", context)
    assert not [f for f in found if f.kind == "condition"]


# ---------------------------------------------------------------- verbatim copies


def test_a_clause_copied_from_the_source_is_never_flagged():
    context = "Adults: take 1 tablet every 8 hours. Do not take more than 3 tablets in 24 hours."
    response = "Take 1 tablet every 8 hours. Do not take more than 3 tablets in 24 hours."
    assert not _failed("How many tablets can I take?", response, context)


# ---------------------------------------------------------------- real errors are still caught


def test_open_against_closed_is_caught_beside_a_supported_time():
    context = "The museum is closed on Mondays. It opens at 10:00 from Tuesday to Sunday."
    found = _facts("Is the museum open on Mondays?", "The museum is open on Mondays from 10:00.", context)
    assert [f.source for f in found if f.kind == "polarity"] == ["The museum is closed on Mondays"]


@pytest.mark.parametrize("words", ["will not run", "is suspended", "is cancelled", "won't operate"])
def test_a_value_the_question_states_is_checked_when_the_source_calls_it_off(words):
    context = (
        f"Notice: on Friday the 07:40 departure {words} because of maintenance. The 08:30 departure runs as usual."
    )
    question = "I usually take the 07:40 ferry on Friday. Can I still do that?"
    status, source = _status(question, "Yes, take the 07:40 ferry as usual.", context, "07:40")
    assert status == "contradicted" and "07:40 departure" in source
    # an answer that says so is no error
    assert not _failed(question, "No: on Friday the 07:40 departure is cancelled; take the 08:30.", context)


def test_a_limit_is_compared_with_the_source_limit():
    assert _status("What do I need?", "You need at least 70 % to pass.", "You need 80 % to pass.", "70")[0] == (
        "contradicted"
    )
    assert _status("What do I need?", "You need at least 80 % to pass.", "You need 80 % to pass.", "80")[0] == (
        "supported"
    )


def test_a_rate_per_week_is_not_a_rate_per_day():
    context = "Apply the cream twice per day. Take 2 tablets a day."
    assert _status("How often?", "Apply the cream twice per week.", context, "twice")[0] == "contradicted"
    assert _status("How many?", "Take 2 tablets a week.", context, "2")[0] == "contradicted"
