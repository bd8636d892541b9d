"""CrewAI plugin on real crews, offline: real Agent/Task/Crew objects driven by a scripted BaseLLM,
in ReAct-text and native function-calling modes, scored with the real embedding model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

# crewai imported offline, with HOME in a temporary folder (the `crewai_home` fixture keeps it there
# while these tests run)
from crewai_offline import (  # noqa: F401  (crewai_home: an autouse fixture)
    Agent,
    BaseTool,
    Crew,
    InterceptionPoint,
    Task,
    action,
    content_text,
    crewai_home,
    final,
    get_hooks,
    scripted,
    tool,
)
from missing_extras import hints, run_without

from groundlens_core import evaluate
from groundlens_core.plugins.crewai import (
    SELF_CHECK_TOOL_NAME,
    GroundlensCrewListener,
    GroundlensTool,
    node_name,
    self_check,
)
from groundlens_core.trace import Trace

QUESTION = "How tall is the Eiffel Tower? Answer with its height in metres."
SOURCE = "The Eiffel Tower in Paris is 330 metres tall, including its antennas. It was completed in 1889."
DRAFT = "I think the Eiffel Tower is very tall, maybe the tallest tower in metres."  # ignores the source
REVISED = "The Eiffel Tower is about 330 metres tall, counting its antennas."
FACTS = {"eiffel": SOURCE, "louvre": "The Louvre in Paris is the world's most-visited museum; it opened in 1793."}


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


@pytest.fixture
def listener(calibration):
    with GroundlensCrewListener(calibration=calibration) as gl:
        yield gl


def last_observation(messages) -> str:
    """The text of the last tool result the agent saw (ReAct: an 'Observation:'; native: a tool message)."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "tool":
            return content_text(message)
        text = content_text(message)
        if "Observation:" in text:
            return text.split("Observation:", 1)[1]
    return ""


def tool_call(name: str, args: dict, call_id: str) -> list:
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]


class LookupCounter:
    def __init__(self):
        self.calls: list[str] = []


def make_lookup(counter: LookupCounter | None = None):
    @tool("lookup")
    def lookup(query: str) -> str:
        """Look up a fact about a Paris landmark by keyword (e.g. 'eiffel')."""
        if counter is not None:
            counter.calls.append(query)
        for key, text in FACTS.items():
            if key in query.lower():
                return text
        return "No fact found."

    return lookup


class BrokenTool(BaseTool):
    name: str = "broken_lookup"
    description: str = "A lookup that always fails."

    def _run(self, query: str = "") -> str:
        raise RuntimeError("backend unavailable")


def crew_of(agent, task, **kwargs) -> Crew:
    return Crew(agents=[agent], tasks=[task], verbose=False, **kwargs)


def researcher(llm, tools, **kwargs) -> Agent:
    return Agent(role="Researcher", goal="Answer questions about Paris landmarks from sources.",
                 backstory="A careful researcher.", llm=llm, tools=tools, verbose=False, **kwargs)


def height_task(agent) -> Task:
    return Task(description=QUESTION, expected_output="The height in metres.", agent=agent)


# ------------------------------------------------------------------ packaging


def test_plugin_imports_without_crewai_and_names_the_extra():
    out = run_without(("crewai",), """
        import groundlens_core.plugins.crewai as p
        hint(lambda: p.GroundlensTool)
        hint(lambda: p.GroundlensCrewListener())
    """)
    assert len(hints(out)) == 2
    assert all('pip install "groundlens-core[crewai]"' in h for h in hints(out))


def test_tool_is_a_crewai_base_tool_with_answer_required():
    tool_obj = GroundlensTool()
    assert isinstance(tool_obj, BaseTool)
    assert tool_obj.name == SELF_CHECK_TOOL_NAME
    assert "final answer" in tool_obj.description.lower()
    schema = tool_obj.args_schema.model_json_schema()
    assert schema["required"] == ["answer"]
    assert {"answer", "question", "context"} <= set(schema["properties"])
    assert tool_obj.cache_function({"answer": "x"}, "result") is False


@pytest.mark.parametrize("bad", [None, "", "   ", {"text": "a dict"}, ["a", "list"], True])
def test_tool_with_missing_or_non_text_answer_says_what_to_pass(bad, calibration):
    tool_obj = GroundlensTool(calibration=calibration)
    out = tool_obj.run() if bad is None else tool_obj.run(answer=bad, question=QUESTION)
    assert isinstance(out, str)
    assert "answer" in out and "draft" in out


def test_tool_scores_explicit_arguments_and_orders_answers(calibration):
    grounded = self_check(REVISED, QUESTION, SOURCE, calibration=calibration)
    ignoring = self_check(DRAFT, QUESTION, SOURCE, calibration=calibration)
    assert grounded.splitlines()[1] == "OK to answer."
    assert ignoring.splitlines()[1].startswith("FLAGGED: re-read the retrieved source")
    assert "SGI=" in grounded and "not a verdict of truth" in grounded
    no_context = self_check(REVISED, QUESTION, calibration=calibration)
    assert "DGI=" in no_context and "without source text" in no_context
    # and without a question, a context or a task to take them from, it asks instead of guessing
    assert "question" in self_check(REVISED, calibration=calibration)


def test_self_check_names_the_weakest_sentence_and_works_without_a_question(calibration):
    wrong = "The Eiffel Tower is about 330 metres tall. It was designed by Leonardo da Vinci in 1750."
    reply = self_check(wrong, None, SOURCE, calibration=calibration)  # a source and no question: support
    lines = reply.splitlines()
    assert lines[0].startswith("groundlens self-check: FLAGGED (score ") and "against 1 source" in lines[0]
    assert "SUPPORT=" in lines[0]
    assert lines[1].startswith("FLAGGED: your answer states things the source does not")
    # "designed in 1750" is no statement about when it was completed: the year is judged on its own
    assert lines[2].startswith("Facts to fix: ") and "1750 \u2014 not in the source" in lines[2]
    assert lines[3] == ('Weakest sentence: "It was designed by Leonardo da Vinci in 1750." '
                        "(not in the source: designed, Leonardo, da, Vinci, 1750).")
    with_q = self_check(wrong, QUESTION, SOURCE, calibration=calibration)
    assert "SGI=" in with_q and 'Weakest sentence: "It was designed by Leonardo da Vinci in 1750."' in with_q
    assert "Weakest sentence" not in self_check(REVISED.replace("counting", "including"), QUESTION, SOURCE,
                                                 calibration=calibration)


def test_self_check_carries_the_score_and_names_the_value_the_source_gives(calibration):
    from groundlens_core import evaluate

    question, source = "How long does the contract run?", "The contract runs for a 2-year term and renews each year."
    draft = "The contract runs for a 5-year term."
    reply = self_check(draft, question, source, calibration=calibration)
    res = evaluate(question, draft, source)
    assert reply.splitlines()[0].startswith(f"groundlens self-check: FLAGGED (score {res.score:.2f} of 1, ")
    assert "normalized" not in reply  # one value: the score, beside SGI under its own name
    assert f"SGI={res.value:.2f}" in reply
    assert "Facts to fix: 5-year \u2014 the source says 2-year." in reply.splitlines()
    fixed = self_check("The contract runs for a 2-year term.", question, source, calibration=calibration)
    assert "Facts to fix" not in fixed and "the source says" not in fixed


# ------------------------------------------------------------------ the self-check loop


def revise_if_flagged(messages) -> str:
    """The agent's reaction to its self-check: revise when flagged, else answer with the draft."""
    if "FLAGGED" in last_observation(messages):
        return action(SELF_CHECK_TOOL_NAME, {"answer": REVISED})
    return final(DRAFT)


def test_react_agent_self_checks_is_flagged_and_revises(listener):
    llm = scripted(
        action("lookup", {"query": "eiffel"}),
        action(SELF_CHECK_TOOL_NAME, {"answer": DRAFT}),
        revise_if_flagged,
        final(REVISED),
    )
    agent = researcher(llm, [make_lookup(), listener.self_check_tool()])
    t0 = time.perf_counter()
    out = crew_of(agent, height_task(agent)).kickoff()
    elapsed = time.perf_counter() - t0

    assert out.raw == REVISED
    observations = [last_observation(c["messages"]) for c in llm.calls]
    assert "FLAGGED: re-read the retrieved source" in observations[2]
    assert "OK to answer." in observations[3]
    # a hang guard only (a scripted run takes seconds; 30 s was within reach of a loaded 2-core machine)
    assert elapsed < 300, f"a scripted crew run took {elapsed:.1f}s"

    trace = listener.get_trace()
    assert trace.framework == "crewai" and trace.ended_at and trace.status == "ok"
    node = node_name(agent, height_task(agent))
    assert [s.kind for s in trace.steps] == ["tool_call", "tool", "tool_call", "tool", "tool_call", "tool", "llm"]
    assert {s.node for s in trace.steps if s.kind in ("llm", "tool_call")} == {node}
    assert all(s.method == "skipped" for s in trace.steps[:-1])
    answer = trace.steps[-1]
    assert answer.method == "sgi" and answer.response == REVISED and answer.question == QUESTION
    # the lookup result is context; the self-check's own verdicts never are
    assert [p.source for p in answer.context] == ["tool:lookup"]
    assert answer.context[0].text == SOURCE
    checks = [s for s in trace.steps if s.kind == "tool" and s.metadata.get("self_check")]
    assert len(checks) == 2 and "FLAGGED" in checks[0].response
    # the revision is better grounded than the draft the tool flagged
    assert answer.value > evaluate(QUESTION, DRAFT, SOURCE).value
    assert answer.triage != "flagged"


def test_native_function_calling_agent_self_checks_and_revises(listener):
    def revise_native(messages):
        if "FLAGGED" in last_observation(messages):
            return tool_call(SELF_CHECK_TOOL_NAME, {"answer": REVISED}, "call-3")
        return DRAFT

    llm = scripted(
        tool_call("lookup", {"query": "eiffel"}, "call-1"),
        tool_call(SELF_CHECK_TOOL_NAME, {"answer": DRAFT}, "call-2"),
        revise_native,
        REVISED,
        native=True,
    )
    agent = researcher(llm, [make_lookup(), listener.self_check_tool()])
    out = crew_of(agent, height_task(agent)).kickoff()

    assert out.raw == REVISED
    assert llm.calls[0]["tools"], "crewai did not use native function calling"
    assert "FLAGGED" in last_observation(llm.calls[2]["messages"])
    trace = listener.get_trace()
    assert [s.kind for s in trace.steps] == ["tool_call", "tool", "tool_call", "tool", "tool_call", "tool", "llm"]
    assert all(s.metadata.get("mode") == "native" for s in trace.steps if s.kind in ("tool_call", "llm"))
    answer = trace.steps[-1]
    assert answer.method == "sgi" and answer.response == REVISED
    assert [p.source for p in answer.context] == ["tool:lookup"]


def test_self_check_without_context_uses_the_agents_earlier_tool_results(listener):
    seen = {}

    def remember(messages):
        seen["obs"] = last_observation(messages)
        return final(REVISED)

    llm = scripted(action("lookup", {"query": "eiffel"}), action(SELF_CHECK_TOOL_NAME, {"answer": REVISED}), remember)
    # an unbound tool finds the context through the active listener
    agent = researcher(llm, [make_lookup(), GroundlensTool(calibration=listener.calibration)])
    crew_of(agent, height_task(agent)).kickoff()
    assert "SGI=" in seen["obs"] and "tool:lookup" in seen["obs"]
    check = next(s for s in listener.get_trace().steps if s.metadata.get("self_check"))
    assert "OK to answer." in check.response and "You ONLY have access" not in check.response


# ------------------------------------------------------------------ crews


def research_then_write(writer_answer: str):
    """A researcher (with the lookup tool) finds a fact; a writer gets it as task context and
    answers ``writer_answer``. Returns the crew, its agents and tasks, and the two scripted LLMs."""
    research_llm = scripted(action("lookup", {"query": "eiffel"}), final(SOURCE))
    writer_llm = scripted(final(writer_answer))
    res = researcher(research_llm, [make_lookup()])
    writer = Agent(role="Writer", goal="Write short summaries.", backstory="A concise writer.", llm=writer_llm,
                   verbose=False)
    t1 = Task(description="Find the height of the Eiffel Tower.", expected_output="A fact.", agent=res)
    t2 = Task(description="Write one sentence about the Eiffel Tower's height.", expected_output="A sentence.",
              agent=writer, context=[t1])
    crew = Crew(agents=[res, writer], tasks=[t1, t2], verbose=False)
    return crew, res, writer, t1, t2, research_llm, writer_llm


def test_two_agent_crew_gives_per_agent_steps_and_passes_task_context(listener):
    crew, res, writer, t1, t2, research_llm, writer_llm = research_then_write(
        "At 330 metres including antennas, the Eiffel Tower, completed in 1889, is tall.")
    crew.kickoff()

    trace = listener.get_trace()
    llm_steps = [s for s in trace.steps if s.kind == "llm"]
    assert [s.node for s in llm_steps] == [node_name(res, t1), node_name(writer, t2)]
    assert {s.metadata["agent_role"] for s in trace.steps} == {"Researcher", "Writer"}
    assert trace.metadata["agents"] == ["Researcher", "Writer"]
    research_answer, writer_answer = llm_steps
    assert research_answer.question == t1.description and writer_answer.question == t2.description
    assert [p.source for p in research_answer.context] == ["tool:lookup"]
    # the writer got no tool results, but the researcher's output as task context
    assert [p.source for p in writer_answer.context] == ["task:context"]
    assert SOURCE in writer_answer.context[0].text
    assert research_answer.method == writer_answer.method == "sgi"

    # one trace per kickoff
    research_llm.script.extend([action("lookup", {"query": "eiffel"}), final(SOURCE)])
    writer_llm.script.append(final("The Eiffel Tower is 330 metres tall."))
    crew.kickoff()
    traces = listener.get_traces()
    assert len(traces) == 2 and traces[0].id != traces[1].id
    assert [s.kind for s in traces[1].steps] == [s.kind for s in traces[0].steps]


def test_steps_hang_under_their_agent_in_task_and_tool_results_under_the_turn_that_asked(listener):
    crew, res, writer, t1, t2, _, _ = research_then_write("The Eiffel Tower is 330 metres tall.")
    crew.kickoff()

    trace = listener.get_trace()
    assert trace.metadata["crew_id"] == str(crew.id)  # crew -> the trace
    assert [s.kind for s in trace.steps] == ["tool_call", "tool", "llm", "llm"]
    turn, tool_step, research_answer, writer_answer = trace.steps
    # task -> agent -> LLM call: crewai's own task and agent ids
    assert turn.parent_id == research_answer.parent_id == f"task:{t1.id}/agent:{res.id}"
    assert writer_answer.parent_id == f"task:{t2.id}/agent:{writer.id}"
    assert tool_step.parent_id == turn.id  # the tool result hangs under the turn that asked for it
    # a model turn is timed from its LLM call's start; a tool step has no LLM call
    assert all(s.llm_latency_ms is not None and s.started_at for s in (turn, research_answer, writer_answer))
    assert tool_step.llm_latency_ms is None


def test_failing_tool_still_leaves_a_trace(listener):
    llm = scripted(action("broken_lookup", {"query": "eiffel"}),
                   final("I could not look it up, but the Eiffel Tower is probably around 300 metres tall."))
    agent = researcher(llm, [BrokenTool()])
    out = crew_of(agent, height_task(agent)).kickoff()
    assert "300 metres" in out.raw

    trace = listener.get_trace()
    assert trace is not None and trace.ended_at
    failed = [s for s in trace.steps if s.kind == "tool"]
    assert len(failed) == 1 and failed[0].method == "error" and "backend unavailable" in failed[0].error
    answer = trace.steps[-1]
    assert answer.kind == "llm" and answer.context == ()  # an error message is not a source
    assert answer.method == "dgi"
    assert trace.counts()["error"] == 1


def test_failing_llm_marks_the_trace_as_error(listener):
    def boom(messages):
        raise RuntimeError("model endpoint down")

    llm = scripted(action("lookup", {"query": "eiffel"}), boom)
    agent = researcher(llm, [make_lookup()], max_retry_limit=0)
    with pytest.raises(Exception):
        crew_of(agent, height_task(agent)).kickoff()
    trace = listener.get_trace()
    assert trace.status == "error" and "model endpoint down" in (trace.error or "")
    assert [s.kind for s in trace.steps] == ["tool_call", "tool"]


def test_self_check_with_empty_answer_in_a_crew_tells_the_agent_and_the_task_goes_on(listener):
    seen = {}

    def after_empty(messages):
        seen["obs"] = last_observation(messages)
        return final(REVISED)

    llm = scripted(action(SELF_CHECK_TOOL_NAME, {"answer": ""}), after_empty)
    agent = researcher(llm, [listener.self_check_tool()])
    out = crew_of(agent, height_task(agent)).kickoff()
    assert out.raw == REVISED
    assert "Call this tool again with `answer`" in seen["obs"]


def test_crew_cache_never_serves_a_stale_self_check(listener):
    counter = LookupCounter()
    obs = []

    def note(reply):
        def step(messages):
            obs.append(last_observation(messages))
            return reply
        return step

    llm = scripted(
        action(SELF_CHECK_TOOL_NAME, {"answer": REVISED}),  # no sources yet
        note(action("lookup", {"query": "eiffel"})),
        note(action("lookup", {"query": "eiffel"})),  # same lookup again: the crew cache serves it
        note(action(SELF_CHECK_TOOL_NAME, {"answer": REVISED})),  # same arguments, new context
        note(final(REVISED)),
    )
    agent = researcher(llm, [make_lookup(counter), listener.self_check_tool()])
    crew = crew_of(agent, height_task(agent), cache=True)
    crew.kickoff()

    assert counter.calls == ["eiffel"], "the crew cache was not active, so this test proves nothing"
    first_check, second_check = obs[0], obs[3]
    assert "DGI=" in first_check and "without source text" in first_check
    assert "SGI=" in second_check and "tool:lookup" in second_check


# ------------------------------------------------------------------ scoping and exports


def _ours(gl) -> set:
    return set(gl._hooks.values())


def test_close_removes_every_hook_and_listeners_see_only_their_kickoffs(calibration):
    def run():
        llm.script.extend([action("lookup", {"query": "eiffel"}), final(REVISED)])
        crew_of(agent, task).kickoff()

    llm = scripted()
    agent = researcher(llm, [make_lookup()])
    task = height_task(agent)
    run()  # the agent's executor now exists, created before any listener
    assert agent.agent_executor is not None

    gl = GroundlensCrewListener(calibration=calibration)
    run()
    trace = gl.get_trace()
    assert trace is not None and [s.kind for s in trace.steps] == ["tool_call", "tool", "llm"]
    gl.close()

    points = [InterceptionPoint.EXECUTION_START, InterceptionPoint.EXECUTION_END, InterceptionPoint.PRE_MODEL_CALL,
              InterceptionPoint.POST_MODEL_CALL, InterceptionPoint.PRE_TOOL_CALL, InterceptionPoint.POST_TOOL_CALL]
    assert not any(h in _ours(gl) for p in points for h in get_hooks(p))
    executor = agent.agent_executor
    assert not any(h in _ours(gl) for h in executor.before_llm_call_hooks + executor.after_llm_call_hooks)
    run()
    assert len(gl.get_traces()) == 1


def test_trace_exports_json_round_trip_listeners_and_html(calibration, tmp_path):
    events = []

    class Collect:
        def on_trace_start(self, trace):
            events.append("start")

        def on_step(self, trace, step):
            events.append(step.kind)

        def on_trace_end(self, trace):
            events.append("end")

    with GroundlensCrewListener(calibration=calibration, listeners=[Collect()]) as gl:
        llm = scripted(action("lookup", {"query": "eiffel"}), final(REVISED))
        agent = researcher(llm, [make_lookup()])
        crew_of(agent, height_task(agent)).kickoff()
        trace = gl.get_trace()
    assert events == ["start", "tool_call", "tool", "llm", "end"]

    path = tmp_path / "crewai_trace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded.to_dict() == trace.to_dict()
    assert json.loads(path.read_text())["framework"] == "crewai"
    redacted = json.loads(trace.to_json(redact=True))
    assert REVISED not in json.dumps(redacted)

    html = pytest.importorskip("groundlens_core.trace.html")
    out = html.write_html(trace, tmp_path / "crewai_trace.html")
    assert Path(out).exists() and "Researcher" in Path(out).read_text(encoding="utf-8")


def test_standalone_agent_kickoffs_get_their_own_trace_and_context():
    """Two task-less Agent.kickoff() runs: the second must not see the first one's tool output."""
    with GroundlensCrewListener() as gl:
        agent = researcher(scripted(action("lookup", {"query": "eiffel"}), final("It is 330 metres tall."),
                                    final("The Louvre opened in 1793.")), [make_lookup()])
        agent.kickoff("How tall is the Eiffel Tower?")
        agent.kickoff("When did the Louvre open?")
        traces = gl.get_traces()
    assert len(traces) == 2
    first, second = traces
    assert first.ended_at is not None
    answer1 = [s for s in first.steps if s.kind == "llm"][-1]
    answer2 = [s for s in second.steps if s.kind == "llm"][-1]
    assert answer1.method == "sgi" and "Eiffel" in answer1.question
    assert answer2.method == "dgi" and answer2.context == () and "Louvre" in answer2.question


def test_name_titles_every_trace_of_the_listener_and_the_crew_name_is_the_default(calibration):
    """``name=`` is the trace name, as on every adapter; without it a crew's own name, else "crew"."""
    def run(listener_kw: dict, **crew_kw) -> str:
        with GroundlensCrewListener(calibration=calibration, **listener_kw) as gl:
            agent = researcher(scripted(final("It is 330 metres tall.")), [])
            crew_of(agent, height_task(agent), **crew_kw).kickoff()
            return gl.get_trace().name

    assert run({"name": "kettle-crew"}) == "kettle-crew"
    assert run({"name": "kettle-crew"}, name="pilot") == "kettle-crew"  # the listener's name wins
    assert run({}, name="pilot") == "pilot"
    assert run({}) == "crew"
    with GroundlensCrewListener(calibration=calibration, name="kettle-crew") as gl:
        researcher(scripted(final("It is 330 metres tall.")), []).kickoff("How tall is the Eiffel Tower?")
        assert gl.get_trace().name == "kettle-crew"  # a standalone agent run too
