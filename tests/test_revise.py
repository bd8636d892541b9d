"""The revision loop on real LangGraph graphs and LangChain chains: a flagged answer is sent back with
its findings named and the source's values, bounded; the trace links each new answer to the one it
revises. Only the chat model is scripted; the scoring is the real embedder's."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langgraph.graph import END, START, MessagesState, StateGraph
from test_html_report import parse

from groundlens_core import evaluate
from groundlens_core.plugins.langchain import GroundlensCallback, GroundlensRevisingRunnable
from groundlens_core.plugins.langgraph import (
    REVISION_KEY,
    GroundlensLangGraphCallback,
    GroundlensReviser,
)
from groundlens_core.scoring.feedback import feedback_for, findings_of, render_feedback, score_of
from groundlens_core.trace import Trace
from groundlens_core.trace.model import json_schema

SOURCE = "Cancelling before the end of the term costs an early-termination fee of 15 % of the remaining contract value."
QUESTION = "What does it cost to cancel my contract early?"
WRONG = "You pay an early-termination fee of 25 % of the remaining contract value."
RIGHT = "You pay an early-termination fee of 15 % of the remaining contract value."


class ScriptedModel(GenericFakeChatModel):
    """Answers from a list in order; remembers every prompt it was given."""

    replies: list = []
    seen: list = []
    messages: Any = iter(())

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.replies.pop(0)))])


def model(*replies: str) -> ScriptedModel:
    return ScriptedModel(replies=list(replies), seen=[])


def llm_steps(trace: Trace) -> list:
    return [s for s in trace.steps if s.kind == "llm"]


# ---------------------------------------------------------------- the feedback text


def test_feedback_names_the_fact_and_the_source_value():
    res = evaluate(QUESTION, WRONG, [SOURCE])
    assert res.triage == "flagged"
    [finding] = findings_of(res)
    assert (finding.text, finding.status, finding.source) == ("25 %", "contradicted", "15 %")
    fb = feedback_for(res)
    assert fb.revise and fb.band == "flagged" and fb.score == score_of(res) == res.score
    assert fb.text.startswith("The source says 15 %, not 25 %.")
    assert "Answer again from the source" in fb.text


def test_feedback_is_none_for_an_answer_that_is_not_flagged():
    res = evaluate(QUESTION, RIGHT, [SOURCE])
    assert res.triage == "trusted"
    fb = feedback_for(res)
    assert not fb.revise and fb.text is None and fb.findings == ()


def test_feedback_for_an_unsupported_fact_and_for_an_answer_with_no_failed_fact():
    res = evaluate(QUESTION, "You pay a fee of 15 % and a 90-day notice applies.", [SOURCE])
    assert res.triage == "flagged"
    assert [(f.text, f.status) for f in findings_of(res)] == [("90-day", "unsupported")]
    text = render_feedback(res)
    assert text.startswith("The source does not state 90-day.")
    # no fact failed (it ignores its source): the words the source lacks are named instead
    ignores = evaluate(None, "Bananas are yellow and monkeys love eating them every single morning.", [SOURCE])
    assert ignores.triage == "flagged" and findings_of(ignores) == ()
    assert "(not in the source: Bananas, yellow, monkeys" in render_feedback(ignores)
    assert render_feedback(ignores).endswith("state nothing it does not support.")


SHIPPING = "Returns are accepted within 30 days of delivery. Return shipping is paid by the customer."
CASE = "The X200 ships with a charger and a USB-C cable. The padded travel case is sold separately for $29."


@pytest.mark.parametrize(
    ("question", "answer", "source", "want"),
    [
        (
            "Who pays for return shipping?",
            "Returns are accepted within 30 days, and return shipping is free.",
            SHIPPING,
            "The source says return shipping is paid by the customer; the answer says it is free.",
        ),
        (
            "Does the X200 come with a case?",
            "The X200 has a padded travel case included in the box.",
            CASE,
            "The source says the padded travel case is sold separately for $29; the answer says the X200 has a "
            "padded travel case included in the box.",
        ),
        (
            "When is it open?",
            "The museum is open on Mondays.",
            "The museum is closed on Mondays.",
            "The source says the museum is closed on Mondays; the answer says it is open on Mondays.",
        ),
        (
            "Can I get a refund?",
            "You can get a refund for your ticket.",
            "You can get a refund only for cancellations made 48 hours ahead.",
            "The answer says you can get a refund for your ticket; the source adds a condition: only for "
            "cancellations made 48 hours ahead.",
        ),
    ],
    ids=["shared-subject", "other-subject", "flipped", "condition"],
)
def test_feedback_on_a_claim_reads_as_one_sentence(question, answer, source, want):
    """A contradicted claim is quoted inside the sentence: no joining "and", no capital mid-sentence,
    the shared subject said once."""
    res = evaluate(question, answer, [source])
    assert res.triage == "flagged"
    text = render_feedback(res)
    assert text.startswith(want + " Answer again from the source"), text


def test_a_claim_quoted_mid_sentence_keeps_its_names_capitalised():
    from groundlens_core.scoring.feedback import _clause, _what_the_answer_says

    assert _clause("Paris is the capital of France.", "Paris is the capital") == "Paris is the capital of France"
    assert _clause("And Return shipping is free", "return shipping") == "return shipping is free"
    assert _clause("USB-C cables are included", "") == "USB-C cables are included"
    assert _clause("The fees are waived", "") == "the fees are waived"
    assert _what_the_answer_says("the fees are due in May", "the fees are waived") == "they are waived"
    assert _what_the_answer_says("the hotel can host 200 guests", "the hotel can host 500") == "it can host 500"
    assert _what_the_answer_says("you can pay later", "you can pay now") == "you can pay now"


# ---------------------------------------------------------------- LangGraph


class FeeState(MessagesState):
    context: str


def revision_loop(state: type, answer, revise, route):
    """The compiled loop ``answer`` -> ``route`` -> ``revise`` -> ``answer`` ... until ``route`` accepts."""
    g = StateGraph(state)
    g.add_node("answer", answer)
    g.add_node("revise", revise)
    g.add_edge(START, "answer")
    g.add_conditional_edges("answer", route, {"revise": "revise", "accept": END})
    g.add_edge("revise", "answer")
    return g.compile()


def fee_graph(llm: ScriptedModel, reviser: GroundlensReviser):
    def answer(state: FeeState) -> dict:
        prompt = [SystemMessage("Answer from this source only:\n" + state["context"]), *state["messages"]]
        return {"messages": [llm.invoke(prompt)]}

    return revision_loop(FeeState, answer, reviser.revise, reviser.route)


@pytest.fixture
def callback(dgi_calibration):
    return GroundlensLangGraphCallback(calibration=dgi_calibration)


def run_fee_graph(callback, llm, max_revisions=2):
    reviser = GroundlensReviser(callback, max_revisions=max_revisions)
    out = fee_graph(llm, reviser).invoke(
        {"messages": [HumanMessage(QUESTION)], "context": SOURCE}, config={"callbacks": [callback]}
    )
    return out, callback.get_trace()


def test_langgraph_wrong_answer_is_revised_once_then_accepted(callback):
    llm = model(WRONG, RIGHT)
    out, trace = run_fee_graph(callback, llm)
    assert out["messages"][-1].content == RIGHT
    # the second call saw the feedback, naming the fact and the source's value
    feedback = llm.seen[1][-1]
    assert feedback.type == "human" and feedback.additional_kwargs[REVISION_KEY] == 1
    assert "The source says 15 %, not 25 %" in feedback.content
    first, second = llm_steps(trace)
    assert first.triage == "flagged" and first.revision_of is None
    assert second.triage == "trusted" and second.revision_of == first.id
    assert second.metadata[REVISION_KEY] == 1
    # the feedback is not the revised call's question, and the context is the source
    assert second.question == first.question == QUESTION
    assert [c.text for c in second.context] == [SOURCE]
    data = json.loads(trace.to_json())
    jsonschema.validate(data, json_schema())
    assert [s["revision_of"] for s in data["steps"] if s["kind"] == "llm"] == [None, first.id]
    assert Trace.from_json(trace.to_json()).steps[-1].revision_of == first.id
    # the report's row of the revision points at the flagged row (report.js draws the mark)
    doc = trace.to_html()
    [data] = [body for attrs, body in parse(doc).scripts if attrs.get("type") == "application/json"]
    rows = json.loads(data)["rows"]
    pos = {r["id"]: k for k, r in enumerate(rows)}
    assert rows[pos[second.id]]["rev"] == pos[first.id] and rows[pos[first.id]]["rev"] is None


def test_langgraph_repeated_error_stops_at_the_bound_and_stays_flagged(callback):
    llm = model(WRONG, WRONG, WRONG, "never asked")
    out, trace = run_fee_graph(callback, llm, max_revisions=2)
    assert llm.replies == ["never asked"]  # 1 answer + 2 revisions, then accepted
    assert out["messages"][-1].content == WRONG
    marks = [m.additional_kwargs.get(REVISION_KEY) for m in out["messages"] if m.type == "human"]
    assert marks == [None, 1, 2]
    steps = llm_steps(trace)
    assert [s.triage for s in steps] == ["flagged"] * 3
    assert [s.revision_of for s in steps] == [None, steps[0].id, steps[1].id]


def test_langgraph_async_graph_with_the_async_router(callback):
    import asyncio

    llm = model(WRONG, RIGHT)
    reviser = GroundlensReviser(callback)

    async def answer(state: FeeState) -> dict:
        return {"messages": [await llm.ainvoke([SystemMessage(state["context"]), *state["messages"]])]}

    graph = revision_loop(FeeState, answer, reviser.arevise, reviser.aroute)
    value = {"messages": [HumanMessage(QUESTION)], "context": SOURCE}
    out = asyncio.run(graph.ainvoke(value, config={"callbacks": [callback]}))
    assert out["messages"][-1].content == RIGHT
    first, second = llm_steps(callback.get_trace())
    assert second.revision_of == first.id and first.triage == "flagged"


def test_langgraph_zero_revisions_only_scores(callback):
    llm = model(WRONG)
    out, trace = run_fee_graph(callback, llm, max_revisions=0)
    assert out["messages"][-1].content == WRONG and len(llm_steps(trace)) == 1


def test_langgraph_answer_kept_in_a_state_key(dgi_calibration):
    class QAState(MessagesState):
        question: str
        context: str
        answer: str

    llm = model(WRONG, RIGHT)
    reviser = GroundlensReviser(
        calibration=dgi_calibration, question_key="question", answer_key="answer", max_revisions=1
    )

    def answer(state: QAState) -> dict:
        prompt = [SystemMessage(state["context"]), HumanMessage(state["question"]), *state.get("messages", [])]
        return {"answer": llm.invoke(prompt).content}

    graph = revision_loop(QAState, answer, reviser.revise, reviser.route)
    out = graph.invoke({"question": QUESTION, "context": SOURCE, "messages": []})
    assert out["answer"] == RIGHT
    assert [m.type for m in llm.seen[1]] == ["system", "human", "ai", "human"]
    assert llm.seen[1][2].content == WRONG and "The source says 15 %" in llm.seen[1][3].content


def test_router_accepts_what_it_cannot_check_and_rejects_bad_settings(dgi_calibration):
    reviser = GroundlensReviser(calibration=dgi_calibration)
    assert reviser.route({"messages": []}) == "accept"
    assert reviser.route({"messages": [HumanMessage(QUESTION)]}) == "accept"
    assert reviser.revise({"messages": [HumanMessage(QUESTION), AIMessage(RIGHT)], "context": SOURCE}) == {}
    assert reviser.route(object()) == "accept"  # an odd state is read as empty, never raised on
    with pytest.raises(ValueError, match="max_revisions"):
        GroundlensReviser(max_revisions=-1)
    with pytest.raises(TypeError, match="adapter"):
        GroundlensReviser("not an adapter")  # type: ignore[arg-type]


# ---------------------------------------------------------------- LangChain


def fee_chain(llm: ScriptedModel):
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer from this source only:\n{context}"),
            ("human", "{question}"),
            MessagesPlaceholder("groundlens_feedback", optional=True),
        ]
    )
    return prompt | llm


def test_langchain_wrapper_revises_once_then_accepts(dgi_calibration):
    callback = GroundlensCallback(calibration=dgi_calibration)
    llm = model(WRONG, RIGHT)
    chain = GroundlensRevisingRunnable(fee_chain(llm), adapter=callback)
    out = chain.invoke({"question": QUESTION, "context": SOURCE}, config={"callbacks": [callback]})
    assert out.content == RIGHT
    assert [m.type for m in llm.seen[1]] == ["system", "human", "ai", "human"]
    assert llm.seen[1][2].content == WRONG
    assert "The source says 15 %, not 25 %" in llm.seen[1][3].content
    trace = callback.get_trace()
    first, second = llm_steps(trace)
    assert (first.triage, second.triage) == ("flagged", "trusted")
    assert second.revision_of == first.id and second.question == QUESTION


def test_langchain_wrapper_stops_at_the_bound(dgi_calibration):
    callback = GroundlensCallback(calibration=dgi_calibration)
    llm = model(WRONG, WRONG, "never asked")
    chain = GroundlensRevisingRunnable(fee_chain(llm), adapter=callback, max_revisions=1)
    out = chain.invoke({"question": QUESTION, "context": SOURCE}, config={"callbacks": [callback]})
    assert out.content == WRONG and llm.replies == ["never asked"]
    steps = llm_steps(callback.get_trace())
    assert [s.triage for s in steps] == ["flagged", "flagged"]
    assert steps[1].revision_of == steps[0].id


def test_langchain_wrapper_on_a_chat_model_with_a_message_list(dgi_calibration):
    llm = model(WRONG, RIGHT)
    chain = GroundlensRevisingRunnable(llm, calibration=dgi_calibration, context=SOURCE)
    out = chain.invoke([HumanMessage(QUESTION)])
    assert out.content == RIGHT
    assert [m.type for m in llm.seen[1]] == ["human", "ai", "human"]


async def _ainvoke(chain, value):
    return await chain.ainvoke(value)


def test_langchain_wrapper_async_and_a_string_answer(dgi_calibration):
    import asyncio

    from langchain_core.output_parsers import StrOutputParser

    llm = model(WRONG, RIGHT)
    chain = GroundlensRevisingRunnable(fee_chain(llm) | StrOutputParser(), calibration=dgi_calibration)
    out = asyncio.run(_ainvoke(chain, {"question": QUESTION, "context": SOURCE}))
    assert out == RIGHT
