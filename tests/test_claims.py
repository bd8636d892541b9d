"""Claims without a number, values the question states, and quantities written in two units: what a
new user tries first. Each case names the finding the explanation must carry."""

import pytest

import groundlens_core as gl
from groundlens_core.evidence.claims import FAMILIES
from groundlens_core.evidence.factcheck import check_facts, context_facts
from groundlens_core.evidence.facts import extract_facts
from groundlens_core.evidence.passages import plan_evidence


def findings(response, context, question=None):
    plan = plan_evidence(response, context)
    return check_facts(plan.response_spans, context_facts(context, plan.context_spans), question)


def failed(response, context, question=None):
    return [f.describe() for f in findings(response, context, question) if f.failed]


@pytest.mark.parametrize(
    "context, wrong, said",
    [
        ("The museum is closed on Mondays.", "Yes, it is open on Mondays.", "The museum is closed on Mondays"),
        ("Dogs are not permitted in the building.", "Yes, dogs are allowed in the building.", "Dogs are not permitted"),
        ("Parking costs £3 per day.", "Yes, parking is free.", "Parking costs £3 per day"),
        ("Installation is charged separately.", "Yes, installation is included.", "charged separately"),
        ("Your claim has not yet been approved.", "Your claim has been approved.", "not yet been approved"),
        ("Version 2.0 adds a Postgres sink. The Kafka sink is deprecated.", "Version 2.0 adds a Kafka sink.", "deprecated"),
        ("Do not bathe or swim until the wounds have healed.", "Baths and swimming are fine.", "Do not bathe"),
        ("Parking is free on Sundays.", "Parking on Sundays is charged at the usual rate.", "Parking is free on Sundays"),
    ],
)  # fmt: skip
def test_a_polarity_flipped_in_other_words_is_contradicted_with_what_the_source_says(context, wrong, said):
    (polarity,) = [f for f in findings(wrong, context) if f.kind == "polarity"]
    assert polarity.status == "contradicted" and said in polarity.describe()


LIST_SOURCE = (
    "Online stores typically enable shoppers to use search features to find specific models, brands or items. "
    "The kit includes a tamper, a milk jug and two filter baskets."
)


@pytest.mark.parametrize(
    "wrong, item",
    [
        ("The kit includes a tamper, a milk jug, a descaling kit and two filter baskets.", "a descaling kit"),
        (
            "Online stores typically enable shoppers to use search features to find specific models, brands, items or distribution.",
            "or distribution",
        ),
    ],
)
def test_an_item_added_to_a_copied_list_is_unsupported(wrong, item):
    found = [f for f in findings(wrong, LIST_SOURCE, "What is in it?") if f.failed]
    assert [(f.kind, f.status, wrong[f.start : f.end]) for f in found] == [("claim", "unsupported", item)]


@pytest.mark.parametrize(
    "right",
    [
        "The kit includes a tamper, a milk jug, and two filter baskets.",
        "The kit includes a tamper, a milk jug and two filter baskets, among others.",
        "The kit includes a tamper, a milk jug, two filter baskets, etc.",
        "The kit includes a tamper, a stainless milk jug and two filter baskets.",  # no new item
    ],
)
def test_a_list_copied_with_its_own_items_adds_nothing(right):
    assert [f for f in findings(right, LIST_SOURCE, "What is in it?") if f.failed] == []


@pytest.mark.parametrize(
    "context, right",
    [
        ("Refunds are available unless the ticket was used.", "Refunds are available unless you have used the ticket."),
        ("Entry is free of charge for children.", "Children get in free of charge."),
        ("Blue Badge holders may park free of charge with no time limit.", "Blue Badge holders park free."),
        ("Do not bathe or swim until the wounds have healed.", "But no baths or swimming until the wounds have healed."),
        ("The fixed rate is available only if the loan completes by 30 November.",
         "Completing on 12 December, the fixed rate would not be available to you."),
        ("Later cancellations and no-shows are charged the first night.", "After that you pay for the first night."),
        # negations, modals and schedules, read as a person reads them
        ("No pets are allowed in the hotel.", "Pets are not permitted."),
        ("Smoking is prohibited on board.", "You may not smoke on board."),
        ("Overnight parking is prohibited.", "You can not park here overnight."),
        ("Littering is punished with fines.", "Littering is prohibited."),
        ("The museum is closed on Mondays.", "The museum is open every day except Monday."),
        ("The store is open until 9 pm.", "The store closes at 9 pm."),
        ("Parking is free of charge.", "Parking costs nothing."),
        ("Applications may be submitted until 5 May.", "Applications cannot be submitted after 5 May."),
        ("No serious adverse events were attributed to it.", "It was safe, with no serious adverse events attributed to it."),
    ],
)  # fmt: skip
def test_the_same_polarity_in_other_words_is_not_a_contradiction(context, right):
    assert not [f for f in findings(right, context) if f.kind == "polarity"]


def test_a_dropped_condition_names_the_condition():
    context = "Refunds are given only for cancellations made 48 hours ahead."
    assert failed("Yes, you can get a refund.", context) == [
        "you can get a refund \u2014 the source adds a condition: only for cancellations made 48 hours ahead"
    ]
    assert not failed("Yes, if you cancel 48 hours ahead you get a refund.", context)
    assert not failed("No, you cannot get a refund.", context)


def test_an_added_claim_is_not_in_the_source():
    context = "The price covers the dishwasher and delivery."
    assert failed("The price covers the dishwasher and delivery. Installation is included.", context) == [
        "not in the source: Installation is included"
    ]
    assert failed("The price covers delivery, and it also works offline with the cloud app.", context)
    # new words beside a value the source bears out are a paraphrase, not a claim
    policy = "Refunds are issued to the original payment method within 5 business days."
    assert not failed("Your refund goes back to the card you paid with, usually within five business days.", policy)


@pytest.mark.parametrize(
    "context, wrong, said",
    [
        ("Full-time staff get 30 days of paid leave a year; interns get 10 days.", "Interns get 30 days of paid leave.",
         "30 days \u2014 the source says 10 days"),
        ("Revenue grew 9% in Asia and 4% in Europe.", "Revenue grew 9% in Europe.", "9% \u2014 the source says 4%"),
    ],
)  # fmt: skip
def test_a_value_the_source_attaches_to_something_else_is_contradicted(context, wrong, said):
    assert said in failed(wrong, context)


def test_a_value_the_question_states_is_the_users_situation():
    context = "The early-bird price applies to arrivals on or before 1 June."
    q = "I arrive on 9 June; can I still get the 1 June early-bird price?"
    answer = "No: arriving on 9 June is after the 1 June early-bird deadline."
    assert not failed(answer, context, q)
    assert [f.status for f in findings(answer, context, q) if f.kind == "date"] == ["question", "supported"]
    assert failed(answer, context)  # without the question, 9 June is a claim about the source
    pool = "The pool is suspended from Monday to Thursday for maintenance."
    assert not failed("No, on Tuesday the pool is suspended.", pool, "Is the pool open on Tuesday?")
    # a value taken from the question in place of the source's own is still wrong
    fee = "The fee is 15% of the balance."
    assert failed("Yes, the fee is 25%.", fee, "Is the fee 25%?") == ["25% \u2014 the source says 15%"]


@pytest.mark.parametrize(
    "a, b",
    [
        ("135 minutes", "2 hours 15 minutes"),
        ("45 minutes", "three quarters of an hour"),
        ("15 minutes", "a quarter of an hour"),
        ("30 months", "two and a half years"),
        ("18 months", "1 year and 6 months"),
    ],
)
def test_a_quantity_in_two_units_is_one_value(a, b):
    assert [(f.dim, f.value) for f in extract_facts(f"It is {a}.")] == [
        (f.dim, f.value) for f in extract_facts(f"It is {b}.")
    ]


def test_ranges_bounds_and_abbreviations():
    assert not failed("It is open from 10:00 to 14:00.", "The office opens at 10:00 and closes at 14:00.")
    assert not failed("Staff with over a year of service qualify.", "Staff with at least 13 months of service qualify.")
    assert not failed(
        "With more than a year of service you qualify.", "With at least 12 months of service you qualify."
    )
    assert failed("Send it no more than 8 weeks before.", "Send it at least 8 weeks before.")
    assert not failed("The MD signs the contract.", "The contract is signed by the Managing Director.")
    assert not failed("Enter your PIN and the IBAN.", "Enter your code and the account number.")
    assert not failed("Pay the VAT.", "Prices include value added tax.")  # unverified: shown, never a flag
    assert [f.status for f in findings("Pay the VAT.", "Prices include Value Added Tax.") if f.kind == "name"] == [
        "supported"
    ]


def test_the_reason_names_the_finding_and_never_says_the_facts_are_in_the_source():
    r = gl.evaluate(question="Is the museum open on Mondays?", response="Yes, it is open on Mondays.",
                    context="The museum is closed on Mondays. It opens at 10:00 on other days.")  # fmt: skip
    assert r.triage == "flagged"
    assert "it is open on Mondays \u2014 the source says The museum is closed on Mondays" in r.explanation
    assert "the facts it states are in the source" not in r.explanation


def test_a_summary_is_not_flagged_for_an_added_clause_but_ranks_below_a_faithful_one():
    source = "The council approved the budget of $2 million on Monday. The vote was 7 to 2."
    faithful = gl.evaluate(response="The council approved the $2 million budget on Monday, 7 to 2.", context=source)
    added = gl.evaluate(
        response="The council approved the $2 million budget on Monday. Residents celebrated downtown.",
        context=source,
    )
    assert added.triage == "review" and "not in the source" in added.explanation
    assert added.score < faithful.score
    wrong = gl.evaluate(response="The council approved the $3 million budget on Monday.", context=source)
    assert wrong.triage == "flagged"


def test_every_family_has_two_sides():
    assert all(yes and no and not set(yes) & set(no) for yes, no in FAMILIES.values())


def test_courtesies_lists_and_abbreviations_are_not_findings():
    source = "Entry to the park is free. Parking is free unless you hold a permit."
    assert not failed("Entry to the park is free. I hope this helps! Let me know if you have other questions.", source)
    # a list of one unit is not one quantity: "2 years, and 1 year" is no 36 months
    terms = "The warranty is 2 years, and 1 year for batteries."
    assert not failed("The warranty is 2 years.", terms)
    assert [f.status for f in findings("Alice Smith won the award.", "Bob Jones won the award as the youngest nominee.")
            if f.kind == "name"] == ["unsupported"]  # fmt: skip
    assert failed("The FDA approved the drug.", "The EMA approved the drug in May.")  # a rival abbreviation
    assert not failed(
        "Interns get 10 days of paid leave.", "Full-time staff get 30 days of paid leave; interns get 10 days."
    )
    # a value of money the question names and the source lacks is still a claim about the source
    assert failed("Yes, the joining fee is 50 euros.", "Members pay monthly.", "Is the joining fee 50 euros?")


SCOPE_SOURCE = (
    "In most countries, neurosurgeon training requires a minimum period of seven years after medical school. "
    "Visitors can register online. All residents must register with the council within 30 days. "
    "Work with concentrated acids must be carried out in a fume hood."
)


@pytest.mark.parametrize(
    "wrong, word, said",
    [
        (
            "In all countries, neurosurgeon training requires a minimum period of seven years after medical school.",
            "all",
            "In most countries",
        ),
        ("Visitors must register online.", "must", "Visitors can register online"),
        ("Residents may register with the council within 30 days.", "may", "All residents must register"),
        ("Most residents must register with the council within 30 days.", "Most", "All residents must register"),
        # the scope word beside another change
        ("Yes, most residents must register with the council within 30 days.", "most", "All residents must register"),
    ],
)
def test_a_copied_sentence_with_another_scope_is_contradicted(wrong, word, said):
    found = [f for f in findings(wrong, SCOPE_SOURCE, "Who registers, and how?") if f.failed]
    assert [(f.kind, f.status, wrong[f.start : f.end]) for f in found] == [("scope", "contradicted", word)]
    assert said in found[0].source


@pytest.mark.parametrize(
    "right",
    [
        "In most countries, neurosurgeon training takes at least seven years after medical school.",
        "All residents have to register with the council within 30 days.",
        "Concentrated acids may only be handled in a fume hood.",  # "may only": a requirement
        "Only residents must register with the council within 30 days.",  # an "only" is not held against it
        "Visitors cannot register by post.",  # "cannot" is no "can"
        "All visitors enjoy the garden.",  # shares too little with any source sentence
    ],
)
def test_the_same_scope_in_other_words_is_no_scope_finding(right):
    assert [f for f in findings(right, SCOPE_SOURCE, "Who registers, and how?") if f.kind == "scope"] == []


def test_a_scope_finding_flags_and_the_feedback_quotes_the_source_sentence():
    from groundlens_core.scoring.feedback import feedback_for

    res = gl.evaluate("How do visitors register?", "Visitors must register online.", SCOPE_SOURCE)
    assert res.triage == "flagged"
    assert res.decision.findings[0].describe() == "must — the source says Visitors can register online"
    assert 'The source says: "Visitors can register online". The answer says "must" instead.' in feedback_for(res).text


SWAP_SOURCE = (
    "Tom accuses Gatsby of having never attended Oxford and of making his fortune through bootlegging. "
    "He is saved by Alfred and given an antidote developed by Fox. "
    "The European Medicines Agency approved the drug in March."
)
NUMBERS_SOURCE = (
    "In February 1948, the Communists forced what remained of the Social Democrats to merge with them. "
    "The party had been founded in 1947. The timeout is 500 ms. About 48% of the experts agreed. "
    "In 2004, the Eiffel Tower began hosting a seasonal ice rink on the first level."
)
#: (source, question) of the swap cases
NAMES = (SWAP_SOURCE, "What happens?")
NUMBERS = (NUMBERS_SOURCE, "What happened?")


@pytest.mark.parametrize(
    "asked, wrong, kind, value, theirs",
    [
        # a name the source gives elsewhere, put where the copied sentence has another
        (
            NAMES,
            "Tom accuses Gatsby of having never attended Tom and of making his fortune through bootlegging.",
            "name",
            "Tom",
            "Oxford",
        ),
        (NAMES, "He is saved by Alfred and given an antidote developed by Gatsby.", "name", "Gatsby", "Fox"),
        # a year the source names for something else, put in a sentence copied from it
        (
            NUMBERS,
            "In February 1947, the Communists forced what remained of the Social Democrats to merge with them.",
            "year",
            "1947",
            "1948",
        ),
        (NUMBERS, "In 2014, the Eiffel Tower began hosting a seasonal ice rink on the first level.", "year", "2014", "2004"),
    ],
)
def test_a_value_swapped_in_a_copied_sentence_is_contradicted(asked, wrong, kind, value, theirs):
    source, question = asked
    found = [f for f in findings(wrong, source, question) if f.failed]
    assert [(f.kind, f.status, wrong[f.start : f.end], f.source) for f in found] == [
        (kind, "contradicted", value, theirs)
    ]


@pytest.mark.parametrize(
    "asked, right",
    [
        (NAMES, "Gatsby is accused by Tom of having never attended Oxford and of making his fortune through bootlegging."),
        (NAMES, "The EMA approved the drug in March."),  # initials of the source's name
        (NAMES, "The Agency approved the drug in March."),  # part of it
        (NAMES, "Batman is saved by Alfred and given an antidote developed by Fox."),  # a pronoun resolved
        (NUMBERS, "In February 1948, the Communists forced what remained of the Social Democrats to merge with them."),
        (NUMBERS, "The timeout is 0.5 s."),  # another unit: the fact checks convert it
        (NUMBERS, "The party had been founded in 1947."),
    ],
)
def test_a_reordered_or_shortened_name_the_same_number_or_a_conversion_is_no_swap(asked, right):
    source, question = asked
    assert [f for f in findings(right, source, question) if f.failed] == []


def test_a_number_off_by_a_conversion_factor_is_no_swap():
    from groundlens_core.evidence.copied import find_copy, sentence_words, swapped_numbers

    source = ["About 48 of every 100 experts surveyed agreed with the proposal last year."]
    words = sentence_words(source)

    def swaps(text):
        copy = find_copy(text, source, words)
        assert copy is not None
        return swapped_numbers(copy)

    assert swaps("About 0.48 of every 100 experts surveyed agreed with the proposal last year.") == []
    assert swaps("About 47 of every 100 experts surveyed agreed with the proposal last year.") == [(6, 8, "48")]


@pytest.mark.parametrize(
    "context, right",
    [
        # parallel sentences: the copied one is the one with the same numbers
        (
            "In 2019 the company had 120 employees. In 2020 the company had 150 employees.",
            "In 2020 the company had 150 employees.",
        ),
        ("Version 2 costs 10 dollars. Version 3 costs 15 dollars.", "Version 3 costs 15 dollars."),
        (
            "In March the store opened 3 new branches. In April the store opened 5 new branches.",
            "In April the store opened 5 new branches.",
        ),
        # a phrase after the list is no item of it
        (LIST_SOURCE, "The kit includes a tamper, a milk jug and two filter baskets, in total."),
        (LIST_SOURCE, "The kit includes a tamper, a milk jug and two filter baskets, amongst other things."),
        (
            SCOPE_SOURCE,
            "In most countries, neurosurgeon training requires a minimum period of seven years after medical school, on average.",
        ),
        # prohibitions forbid alike, whatever the modal
        ("Students may not use calculators during the exam.", "Students must not use calculators during the exam."),
        ("You can't bring pets into the building.", "You must not bring pets into the building."),
        # a scope word stated by another sentence of the source, or a superlative
        (
            "Most rooms have a sea view. Every room has a balcony.",
            "Every room has a balcony and most rooms have a sea view.",
        ),
        (
            "Visitors can register online. Every visitor must show a ticket at the entrance.",
            "Visitors can register online, but they must show a ticket.",
        ),
        (
            "The most important rule is to wash your hands often.",
            "The most important rule is to always wash your hands.",
        ),
        # an acronym for the source's name
        (
            "The meeting took place in the United States in the spring of 2019.",
            "The meeting took place in the USA in the spring of 2019.",
        ),
        # a value worked out from the source's, a hedge inside a list, another unit, a reordering
        ("The fee is 10 euros per day.", "The fee is 70 euros per week."),
        ("You can park on Main Street and in the town centre.", "You can park on Main Street, for example, and in the town centre."),
        ("The flight takes 2.5 hours from Paris.", "The flight takes 2 hours and 30 minutes from Paris."),
        ("On weekdays the shop opens at 9 and on weekends at 10.", "On weekends the shop opens at 10 and on weekdays at 9."),
        # case-folded letters that match no scope word as written
        ("Visitors can register online.", "Visitors mu\u017ft register online."),
    ],
)
def test_a_copied_sentence_with_nothing_changed_has_no_copy_finding(context, right):
    found = findings(right, context, "What does it say?")
    assert [f for f in found if f.failed and f.kind in ("scope", "claim", "name", "count", "amount", "year")] == []


def test_a_swapped_name_replaces_the_finding_that_held_it_supported():
    found = findings("He is saved by Alfred and given an antidote developed by Gatsby.", SWAP_SOURCE, "Who?")
    at = [(f.status, f.start) for f in found if f.text == "Gatsby"]
    assert at == [("contradicted", 57)]
