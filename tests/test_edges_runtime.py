"""Edges of the runtime: cost that grows with the input, sinks whose backend never answers, offline
checks, exports with long texts, duplicate step ids, terminal escapes, a full disk."""

from __future__ import annotations

import sys

import pytest

from groundlens_core.evidence import plan_evidence
from groundlens_core.factcheck import check_facts, context_facts

# ---------------------------------------------------------------- fact checking grows linearly

_FORMS = {
    "distinct prices": lambda i, s: f"Item {i} costs {i * 7 + 3 + s} dollars.",
    "one price": lambda i, s: f"Item {i} costs {5 + s} dollars.",
    "bounds": lambda i, s: f"Item {i} costs more than {i * 7 + 3 + s} dollars.",
    "polarity": lambda i, s: f"The room {i} is {'open' if (i + s) % 2 else 'closed'} on Mondays.",
}


def _calls_to_check(form, n: int) -> int:
    """Python and builtin calls made while checking n response sentences against n context sentences."""
    context = " ".join(form(i, 0) for i in range(n))
    response = " ".join(form(i, 1) for i in range(n))
    plan = plan_evidence(response, context)
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        check_facts(plan.response_spans, context_facts(context, plan.context_spans))
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("form", list(_FORMS))
def test_fact_checking_work_grows_linearly_with_the_sentences(form):
    small, large = _calls_to_check(_FORMS[form], 100), _calls_to_check(_FORMS[form], 400)
    # four times the sentences: about four times the calls (every pair compared would be sixteen)
    assert large <= 4.6 * small, (small, large)


def test_a_contradicted_fact_names_a_few_of_many_values_the_source_gives():
    context = " ".join(f"Item {i} costs {i * 7 + 3} dollars." for i in range(300))
    plan = plan_evidence("Item 5 costs 39 dollars.", context)
    (found,) = [f for f in check_facts(plan.response_spans, context_facts(context, plan.context_spans))
                if f.kind.startswith("money")]  # fmt: skip
    assert found.status == "contradicted" and found.source.endswith("\u2026")
    assert found.source.count(";") <= 7


# ---------------------------------------------------------------- terminal escapes are no facts


def test_numbers_inside_terminal_escape_sequences_are_not_facts_and_offsets_stay_true():
    response = "\x1b]0;X\x07\x1b[2J In 1999. \x1b]2;12 days\x1b\\It costs 5 dollars\x07."
    context = "In 1999 the shop opened. It costs 5 dollars."
    plan = plan_evidence(response, context)
    found = [f for f in check_facts(plan.response_spans, context_facts(context, plan.context_spans))]
    assert [(f.text, f.status) for f in found] == [("1999", "supported"), ("5 dollars", "supported")]
    assert all(response[f.start : f.end] == f.text for f in found)


def test_a_number_inside_an_escape_in_the_context_is_no_support():
    plan = plan_evidence("You get 2 attempts.", "\x1b[2J You may try again.")
    found = check_facts(plan.response_spans, context_facts(plan.context, plan.context_spans))
    assert [(f.text, f.status) for f in found if f.kind == "count"] == [("2", "unsupported")]
