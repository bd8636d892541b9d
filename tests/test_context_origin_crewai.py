"""A real crew, offline (a scripted LLM): the tool result an agent reads is context naming the tool
step that returned it, in the trace and in its JSON."""

from __future__ import annotations

# crewai imported offline, with HOME in a temporary folder (the `crewai_home` fixture keeps it there
# while these tests run)
from crewai_offline import Agent, Crew, Task, action, crewai_home, final, scripted, tool  # noqa: F401

from groundlens_core.plugins.crewai import GroundlensCrewListener
from groundlens_core.trace import Trace
from groundlens_core.trace.html import render_html

QUESTION = "How tall is the Eiffel Tower? Answer with its height in metres."
SOURCE = "The Eiffel Tower in Paris is 330 metres tall, including its antennas."


def test_tool_result_names_its_tool_step_as_producer(dgi_calibration):
    @tool("lookup")
    def lookup(query: str) -> str:
        """Look up a fact about a Paris landmark by keyword (e.g. 'eiffel')."""
        return SOURCE

    llm = scripted(action("lookup", {"query": "eiffel"}), final("The Eiffel Tower is 330 metres tall."))
    with GroundlensCrewListener(calibration=dgi_calibration) as listener:
        agent = Agent(
            role="Researcher",
            goal="Answer questions about Paris landmarks from sources.",
            backstory="A careful researcher.",
            llm=llm,
            tools=[lookup],
            verbose=False,
        )
        task = Task(description=QUESTION, expected_output="The height in metres.", agent=agent)
        Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
        trace = listener.get_trace()
    assert [s.kind for s in trace.steps] == ["tool_call", "tool", "llm"]
    _, tool_step, answer = trace.steps
    assert [(p.source, p.producer) for p in answer.context] == [("tool:lookup", tool_step.id)]
    assert answer.method == "sgi" and {s.passage_piece for s in answer.result.evidence.sentences} == {0}
    assert Trace.from_json(trace.to_json()).steps[2].context == answer.context
    assert f'"producer": "{tool_step.id}"' in trace.to_json()
    assert render_html(trace)  # the report reads it
