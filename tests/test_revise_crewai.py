"""The CrewAI revision guardrail on real crews, offline: crewai's own guardrail retry sends a flagged
answer back with its findings; a scripted BaseLLM plays the agent, the real embedder scores."""

from __future__ import annotations

import json

import pytest

# crewai imported offline, with HOME in a temporary folder (the `crewai_home` fixture keeps it there
# while these tests run)
from crewai_offline import Agent, Crew, Task, crewai_home, final, scripted, tool  # noqa: F401  (crewai_home: an autouse fixture)

from groundlens_core.plugins.crewai import (
    REVISION_KEY,
    GroundlensCrewListener,
    GroundlensGuardrail,
)
from groundlens_core.trace import Trace
from groundlens_core.trace.html import render_html

QUESTION = "What does it cost to cancel my contract early?"
SOURCE = "Cancelling before the end of the term costs an early-termination fee of 15 % of the remaining contract value."
WRONG = "You pay an early-termination fee of 25 % of the remaining contract value."
RIGHT = "You pay an early-termination fee of 15 % of the remaining contract value."


LOOKUP = 'Thought: I should read the contract terms.\nAction: contract_terms\nAction Input: {"topic": "cancel"}'


@tool("contract_terms")
def contract_terms(topic: str) -> str:
    """The customer's contract terms about a topic (e.g. 'cancel')."""
    return SOURCE


def run_crew(listener, guardrail, *replies, retries=3):
    llm = scripted(LOOKUP, *replies)
    agent = Agent(
        role="Support",
        goal="Answer customers from their contract.",
        backstory="Careful.",
        llm=llm,
        tools=[contract_terms],
        verbose=False,
    )
    task = Task(
        description=QUESTION,
        expected_output="The fee.",
        agent=agent,
        guardrail=guardrail,
        guardrail_max_retries=retries,
    )
    out = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    listener.flush()
    return out, llm, listener.get_trace()


@pytest.fixture
def listener(dgi_calibration):
    with GroundlensCrewListener(calibration=dgi_calibration) as gl:
        yield gl


def said(call) -> str:
    """The messages of one of the scripted LLM's calls, as text."""
    messages = call["messages"]
    return messages if isinstance(messages, str) else json.dumps(messages, default=str)


def answers(trace):
    return [s for s in trace.steps if s.kind == "llm"]


def test_the_tool_result_an_agent_reads_names_its_tool_step(listener):
    """The context piece of a tool result names the tool step that returned it (its producer), in
    the trace, in its JSON and in the report; the evidence names the piece."""
    out, _, trace = run_crew(listener, None, final(RIGHT))
    assert out.raw == RIGHT
    assert [s.kind for s in trace.steps] == ["tool_call", "tool", "llm"]
    _, tool_step, answer = trace.steps
    assert [(p.source, p.producer) for p in answer.context] == [("tool:contract_terms", tool_step.id)]
    assert answer.method == "sgi" and {s.passage_piece for s in answer.result.evidence.sentences} == {0}
    assert Trace.from_json(trace.to_json()).steps[2].context == answer.context
    assert f'"producer": "{tool_step.id}"' in trace.to_json()
    assert render_html(trace)  # the report reads it


def test_flagged_answer_is_revised_once_then_accepted(listener):
    out, llm, trace = run_crew(listener, GroundlensGuardrail(listener), final(WRONG), final(RIGHT))
    assert out.raw == RIGHT
    assert len(llm.calls) == 3 and "The source says 15 %, not 25 %" in said(llm.calls[2])
    first, second = answers(trace)
    assert first.triage == "flagged" and first.revision_of is None
    assert second.triage == "trusted" and second.revision_of == first.id
    assert second.metadata[REVISION_KEY] == 1
    assert [c.text for c in second.context] == [SOURCE]  # the feedback is not context


def test_repeated_error_stops_at_the_bound_without_failing_the_crew(listener):
    guardrail = GroundlensGuardrail(listener, max_revisions=2)
    out, llm, trace = run_crew(listener, guardrail, final(WRONG), final(WRONG), final(WRONG), final("never"))
    assert out.raw == WRONG and llm.script == [final("never")]
    steps = answers(trace)
    assert [s.triage for s in steps] == ["flagged"] * 3
    assert [s.revision_of for s in steps] == [None, steps[0].id, steps[1].id]
    # the next kickoff starts counting again
    out, llm, _ = run_crew(listener, guardrail, final(WRONG), final(RIGHT))
    assert out.raw == RIGHT


def test_the_task_retries_bound_the_loop_too(listener):
    out, llm, trace = run_crew(
        listener, GroundlensGuardrail(listener, max_revisions=5), final(WRONG), final(WRONG), final("never"), retries=1
    )
    assert out.raw == WRONG and llm.script == [final("never")]  # accepted before crewai would fail the task


def test_without_a_listener_the_context_is_given(dgi_calibration, listener):
    guardrail = GroundlensGuardrail(context=SOURCE, calibration=dgi_calibration)
    out, llm, _ = run_crew(listener, guardrail, final(WRONG), final(RIGHT))
    assert out.raw == RIGHT and "The source says 15 %, not 25 %" in said(llm.calls[2])
    with pytest.raises(ValueError, match="max_revisions"):
        GroundlensGuardrail(max_revisions=True)
