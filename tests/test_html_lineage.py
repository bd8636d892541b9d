"""Cascade lineage: a flagged step's output carried into a later step's context is marked in the
trace JSON, the summary, the ranking, the HTML report and OpenTelemetry; a step whose support comes
from a flagged (or error) output is at most review."""

from __future__ import annotations

import dataclasses
import json
from typing import TypedDict

import jsonschema
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from scripted_graphs import linear_graph
from stored_traces import provider_with_memory
from synthetic_traces import llm_step, score_of
from test_html_report import parse
from test_langgraph_plugin import scripted

from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
from groundlens_core.trace import ContextPiece, Step, Trace
from groundlens_core.trace.html import render_html
from groundlens_core.trace.lineage import annotate, cascade_order
from groundlens_core.trace.model import SCHEMA_VERSION, json_schema

pytest.importorskip("opentelemetry.sdk")

from groundlens_core.trace.otel import OTelExporter  # noqa: E402

POLICY = (
    "Unopened items can be returned within 30 days for a full refund. Opened electronics can be returned "
    "within 14 days and are subject to a 15% restocking fee. Refunds are issued to the original payment method "
    "within 5 business days."
)
QUESTION = "Can I return my opened laptop?"
REPLIES = {
    "plan": "Opened electronics can be returned within 14 days with a 15% restocking fee.",
    # the unsupported claim: the policy says 14 days
    "research": "Opened laptops can be returned within 90 days and the restocking fee is waived for members.",
    "write": "In short: opened laptops can be returned within 90 days and the restocking fee is waived for members.",
}


class S(TypedDict, total=False):
    question: str
    context: str
    plan: str
    answer: str


def three_node_graph():
    def node(name):
        def run(state: S):
            msg = scripted(REPLIES[name]).invoke(
                [SystemMessage("Context:\n" + state["context"]), HumanMessage(state["question"])]
            )
            if name == "research":  # its notes join the state's context, which the next node reads
                return {"context": state["context"] + "\n\nResearch notes: " + msg.content}
            return {"plan": msg.content} if name == "plan" else {"answer": msg.content}

        return run

    return linear_graph(S, **{name: node(name) for name in REPLIES})


def traced_run(graph, inputs: dict) -> tuple[Trace, tuple]:
    """The trace of one run of ``graph`` on ``inputs`` and the OpenTelemetry spans exported for it."""
    provider, spans = provider_with_memory()
    cb = GroundlensLangGraphCallback(listeners=[OTelExporter(provider)])
    graph.invoke(inputs, config={"callbacks": [cb]})
    return cb.get_trace(), spans.get_finished_spans()


@pytest.fixture(scope="module")
def run():
    return traced_run(three_node_graph(), {"question": QUESTION, "context": POLICY})


def test_langgraph_cascade_in_json_summary_and_ranking(run):
    trace, _ = run
    plan, research, write = trace.steps
    assert research.band == "flagged" and "90 days" in research.explanation
    assert write.cascade_from == (research.id,)
    assert plan.cascade_from == () and research.cascade_from == ()
    assert write.band == "review"  # grounded in the flagged research notes: at most review
    assert write.decision.rule == "grounded_in_flagged" and write.decision.origin == research.index
    data = json.loads(trace.to_json())
    jsonschema.validate(data, json_schema())
    assert data["schema_version"] == SCHEMA_VERSION == "1.3"
    assert data["steps"][2]["cascade_from"] == [research.id]
    assert Trace.from_json(trace.to_json()).steps[2].cascade_from == (research.id,)
    assert "cascade: write <- research (flagged)" in trace.summary()
    ids = [s.id for s in trace.riskiest()]
    assert ids.index(write.id) == ids.index(research.id) + 1  # right after its origin


def test_langgraph_cascade_row_is_marked_and_linked_in_html(run):
    trace, _ = run
    research, write = trace.steps[1], trace.steps[2]
    doc = render_html(trace)
    rows = parse(doc).rows
    pos = {r["data-id"]: int(r["data-rank"]) - 1 for r in rows}
    mark = next(r for r in rows if r["data-id"] == write.id)
    assert mark["cascade"] == [pos[research.id]]  # the mark links to the origin's row
    assert pos[write.id] == pos[research.id] + 1
    assert next(r for r in rows if r["data-id"] == research.id)["reason"].startswith("fact: at most 90 days \u2014 the source says at most 14 days")
    assert "carries flagged output of" in doc  # the script's mark (rendered in the browser test)


def test_langgraph_cascade_span_link_in_otel(run):
    trace, spans = run
    research = trace.steps[1]
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(chats) == 3
    origin, later = chats[1], chats[2]
    assert tuple(later.attributes["groundlens.cascade_from"]) == (research.id,)
    assert [link.context.span_id for link in later.links] == [origin.context.span_id]
    assert not origin.links and "groundlens.cascade_from" not in origin.attributes


def step(i, node, triage, response, context=(), **kw):
    rank = {"flagged": 0.1, "review": 0.5, "trusted": 0.9}[triage]
    return llm_step(
        i,
        node,
        score_of("sgi", triage, rank=rank, explanation="x", fingerprint="fp", version="0"),
        question="q",
        response=response,
        context=tuple(ContextPiece(c, "state:notes") for c in context),
        **kw,
    )


CLAIM = "The warranty covers accidental damage for five full years."


def test_rule_sentence_whitespace_case_short_and_unflagged():
    steps = [
        step(0, "a", "flagged", "Yes. " + CLAIM),
        step(
            1,
            "b",
            "trusted",
            "Something else entirely that is long enough.",
            ["Intro.\n  THE warranty covers  accidental damage for five full years. More."],
        ),
        step(2, "c", "trusted", "Yes.", ["yes. nothing else"]),  # "Yes." is too short to link
        step(3, "d", "review", "Another long enough sentence here.", ["Something else entirely that is long enough."]),
    ]
    t = annotate(Trace(id="t", name="n", framework="test", started_at="2025-01-01T00:00:00Z", steps=steps))
    assert [s.cascade_from for s in t.steps] == [(), ("s0",), (), ()]  # s1 is trusted: not an origin


def test_recorder_path_adds_cascade_as_steps_arrive_and_redacted_context_never_links():
    t = Trace(id="t", name="n", framework="test", started_at="2025-01-01T00:00:00Z")
    t.add_step(step(0, "a", "flagged", CLAIM))
    added = t.add_step(step(1, "b", "review", "Fine.", [f"Notes: {CLAIM}"]))
    assert added.cascade_from == ("s0",) and t.steps[1] is added
    redacted = Step(
        id="s2",
        index=2,
        node="c",
        kind="llm",
        method="skipped",
        context=(ContextPiece({"redacted": True, "hmac_sha256": "ab", "length": 60}, "state:notes"),),
    )
    assert t.add_step(redacted).cascade_from == ()


def test_cascade_order_nests_chains_and_keeps_the_rest():
    a = step(0, "a", "flagged", CLAIM)
    b = step(1, "b", "flagged", "Second claim that is certainly long enough.", [CLAIM])
    c = step(2, "c", "trusted", "Third.", ["Second claim that is certainly long enough."])
    d = step(3, "d", "review", "Fourth.")
    t = annotate(Trace(id="t", name="n", framework="test", started_at="2025-01-01T00:00:00Z", steps=[a, b, c, d]))
    a, b, c, d = t.steps
    assert b.cascade_from == ("s0",) and c.cascade_from == ("s1",)
    assert [s.id for s in cascade_order([b, a, d, c])] == ["s0", "s1", "s2", "s3"]
    assert [s.id for s in t.riskiest()] == ["s0", "s1", "s2", "s3"]


def test_files_of_schema_1_0_still_read(tmp_path):
    old = {
        "schema_version": "1.0",
        "package_version": "0.1.0",
        "id": "t",
        "name": "old",
        "framework": "langgraph",
        "started_at": "2025-01-01T00:00:00Z",
        "ended_at": None,
        "status": "ok",
        "error": None,
        "fingerprint": None,
        "metadata": {},
        "steps": [
            {
                "id": "s0",
                "index": 0,
                "parent_id": None,
                "node": "n",
                "kind": "llm",
                "method": "skipped",
                "score": None,
                "triage": None,
                "question": "q",
                "context": [],
                "response": "r",
                "model": None,
                "provider": None,
                "usage": None,
                "started_at": None,
                "ended_at": None,
                "llm_latency_ms": None,
                "scoring_latency_ms": None,
                "error": None,
                "skip_reason": "no question",
                "metadata": {},
            }
        ],
    }
    jsonschema.validate(old, json_schema())
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    t = Trace.load(path)
    assert t.schema_version == "1.0" and t.steps[0].cascade_from == ()
    assert json.loads(t.to_json())["schema_version"] == SCHEMA_VERSION
    with pytest.raises(ValueError, match="cascade_from"):
        Trace.from_dict({**old, "steps": [{**old["steps"][0], "cascade_from": "s9"}]})


# ---------------------------------------------------------------- trust flows through the lineage

CONTRACT = "Ending the contract early costs an early-termination fee of 15 % of the remaining contract value."
FEE_QUESTION = "What does it cost to end the contract early?"
FEE_REPLIES = {
    # the wrong fee: the contract says 15 %
    "answer": "Ending the contract early costs an early-termination fee of 25 % of the remaining contract value.",
    # repeats the wrong answer to the customer, from that answer alone
    "email": "Dear customer, ending the contract early costs an early-termination fee of 25 % of the remaining "
    "contract value.",
    # from the contract, with the flagged answer beside it in its context
    "check": "The contract says an early-termination fee of 15 % of the remaining contract value applies.",
}


class F(TypedDict, total=False):
    question: str
    contract: str  # not a context key: each node names its own context
    answer: str
    email: str
    check: str


def _ask(reply: str, question: str, context: list[str]) -> str:
    """The scripted model, told its context as a caller tells groundlens (``groundlens_context``)."""
    msg = scripted(reply).invoke(
        [SystemMessage("Answer from the context."), HumanMessage(question)],
        config={"metadata": {"groundlens_context": context}},
    )
    return msg.content


def fee_graph():
    def answer(state: F):
        return {"answer": _ask(FEE_REPLIES["answer"], state["question"], [state["contract"]])}

    def email(state: F):  # grounded only in the answer
        return {"email": _ask(FEE_REPLIES["email"], "Write the customer an email about the fee.", [state["answer"]])}

    def check(state: F):  # the contract and the flagged answer, as two pieces
        return {"check": _ask(FEE_REPLIES["check"], state["question"], [state["contract"], state["answer"]])}

    return linear_graph(F, answer=answer, email=email, check=check)


@pytest.fixture(scope="module")
def fee_run():
    return traced_run(fee_graph(), {"question": FEE_QUESTION, "contract": CONTRACT})


def test_a_step_grounded_only_in_a_flagged_output_is_not_trusted(fee_run):
    from groundlens_core import evaluate

    trace, _ = fee_run
    answer, email, check = trace.steps
    assert answer.band == "flagged" and answer.decision.findings[0].describe() == "25 % \u2014 the source says 15 %"
    # on its own context alone the email would be trusted: every fact it states is in that context
    alone = evaluate(email.question, email.response, [p.text for p in email.context])
    assert alone.triage == "trusted"
    assert email.cascade_from == (answer.id,)
    assert email.band == email.triage == email.result.triage == "review" and not email.result.flagged
    d = email.decision
    assert (d.rule, d.origin, d.band) == ("grounded_in_flagged", answer.index, "review")
    assert d.findings == answer.decision.findings  # the origin's findings, with what the source says
    assert email.score == pytest.approx(alone.score - 1 / 3) and 1 / 3 <= email.score < 2 / 3
    assert email.explanation.startswith(
        f"Score {email.score:.2f}, review: grounded in the flagged output of #{answer.index}: "
        "25 % \u2014 the source says 15 %."
    )
    assert email.explanation.removeprefix(f"Score {email.score:.2f}, review: ").count("Score ") == 0
    assert "email <- answer (flagged)" in trace.summary()
    rows = parse(render_html(trace)).rows
    row = next(r for r in rows if r["data-id"] == email.id)
    assert row["reason"].startswith(f"grounded in the flagged output of #{answer.index}: 25 %")
    assert row["data-band"] == "review"


def test_a_step_with_a_real_source_beside_the_flagged_output_keeps_its_band_when_it_leans_on_the_source(fee_run):
    from groundlens_core import evaluate

    trace, _ = fee_run
    answer, email, check = trace.steps
    assert answer.id in check.cascade_from  # the mark stays: its context carries the flagged answer
    alone = evaluate(check.question, check.response, [p.text for p in check.context])
    assert check.triage == alone.triage and check.score == alone.score
    assert check.decision.rule == alone.decision.rule != "grounded_in_flagged"


def test_the_cap_survives_the_json_round_trip_and_reaches_otel(fee_run):
    trace, spans = fee_run
    email = trace.steps[1]
    again = Trace.from_json(trace.to_json())
    assert again.steps[1].decision == email.decision and again.steps[1].triage == "review"
    jsonschema.validate(json.loads(trace.to_json()), json_schema())
    chats = {s.attributes["groundlens.step.id"]: s for s in spans if s.name.startswith("chat")}
    for s in trace.steps:
        attrs = chats[s.id].attributes
        assert attrs["gen_ai.evaluation.score.value"] == attrs["groundlens.score"] == s.score
        assert attrs["groundlens.sgi"] == attrs["groundlens.value"] == s.value
        assert attrs["groundlens.rule"] == s.decision.rule
    assert chats[email.id].attributes["gen_ai.evaluation.score.label"] == "review"
    redacted = trace.to_json(redact=True)
    assert "25 %" not in redacted and "15 %" not in redacted


def test_an_error_step_output_caps_a_step_grounded_in_it():
    from groundlens_core import evaluate
    from groundlens_core.scoring.decision import Upstream, output_sentences
    from groundlens_core.trace.lineage import upstream_of

    alone = evaluate(FEE_QUESTION, FEE_REPLIES["check"], CONTRACT)
    assert alone.triage == "trusted"
    t = Trace(id="t", name="n", framework="test", started_at="2025-01-01T00:00:00Z")
    t.add_step(Step(id="e0", index=0, node="draft", kind="llm", method="error", triage="error",
                    response=CONTRACT, error="groundlens could not score this call: EmbeddingError: x"))  # fmt: skip
    context = (ContextPiece(CONTRACT, "state:draft"),)
    upstream = upstream_of(t, context, "s1")
    assert upstream == (Upstream(0, "error", (), output_sentences(CONTRACT)),)
    res = evaluate(FEE_QUESTION, FEE_REPLIES["check"], CONTRACT, upstream=upstream)
    later = t.add_step(Step(id="s1", index=1, node="final", kind="llm", method="sgi", result=res, triage=res.triage,
                            question=FEE_QUESTION, response=FEE_REPLIES["check"], context=context))  # fmt: skip
    assert later.cascade_from == ("e0",) and later.triage == "review"
    assert later.decision.rule == "grounded_in_error" and later.decision.findings == ()
    assert "grounded in the output of #0, which could not be scored" in later.explanation
    # appending never decides a second time: a step scored without its upstream keeps its band
    kept = t.add_step(dataclasses.replace(later, id="s2", index=2, result=alone, triage=alone.triage, cascade_from=()))
    assert kept.cascade_from == ("e0",) and kept.triage == "trusted" and kept.result is alone
