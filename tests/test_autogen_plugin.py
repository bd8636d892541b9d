"""The AutoGen AgentChat 0.7 adapters with real AssistantAgents, a real RoundRobinGroupChat, a Python
function tool, ReplayChatCompletionClient scripts (offline) and the real embedding model.

Scores are compared by relation, never against numbers copied from a run.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.replay")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.base import TaskResult, TerminationCondition  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination  # noqa: E402
from autogen_agentchat.messages import MultiModalMessage, TextMessage, ToolCallExecutionEvent  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402
from autogen_core import FunctionCall, Image  # noqa: E402
from autogen_core.models import (  # noqa: E402
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResult,
    ModelFamily,
    ModelInfo,
    RequestUsage,
    UserMessage,
)
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402

import groundlens_core.plugins.autogen as ag  # noqa: E402
import groundlens_core.plugins.autogen.client as ag_client  # noqa: E402
from groundlens_core.plugins.autogen import (  # noqa: E402
    GroundlensChatCompletionClient,
    GroundlensChecker,
    GroundlensFlaggedTermination,
    groundlens_trace,
)
from groundlens_core.trace.recorder import Recorder  # noqa: E402

TASK = "What is the population of Paris?"
FACTS = "Paris is the capital of France and has about 2.1 million inhabitants."
GROUNDED = "Paris has about 2.1 million inhabitants and is the capital of France."
OFF_TOPIC = "I enjoy playing tennis on sunny weekends with my friends."
# near the question, far from the tool's facts: SGI well under the review mark
UNGROUNDED = "Paris population statistics: the number of residents living in Paris."
SUMMARY = "In short: Paris, the French capital, has about 2.1 million inhabitants."

INFO = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                 structured_output=False)


def city_facts(city: str) -> str:
    """Facts about a city."""
    return FACTS if city == "Paris" else f"No facts about {city}."


def tool_call() -> CreateResult:
    return CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(20, 8),
                        content=[FunctionCall(id="call-1", name="city_facts", arguments='{"city": "Paris"}')])


def replay(*responses: Any) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(list(responses), model_info=INFO)


from conftest import BrokenEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


def researcher(client: ChatCompletionClient) -> AssistantAgent:
    return AssistantAgent("researcher", model_client=client, tools=[city_facts], reflect_on_tool_use=True,
                          system_message="Look facts up before answering.")


def writer(client: ChatCompletionClient) -> AssistantAgent:
    return AssistantAgent("writer", model_client=client, system_message="Summarise the researcher's answer.")


def team(research_client, write_client, *conditions: TerminationCondition) -> RoundRobinGroupChat:
    condition = MaxMessageTermination(3)
    for c in conditions:
        condition = condition | c
    return RoundRobinGroupChat([researcher(research_client), writer(write_client)], termination_condition=condition)


async def scripted_team_result(answer: str = GROUNDED) -> TaskResult:
    return await team(replay(tool_call(), answer), replay(SUMMARY)).run(task=TASK)


def shape(trace) -> list[tuple[str, str, str]]:
    return [(s.node, s.kind, s.method) for s in trace.steps]


# ---------------------------------------------------------------- the wrapped model client


async def test_wrapped_clients_score_each_agent_with_tool_and_agent_context(calibration):
    recorder = Recorder("autogen", calibration=calibration)
    inner_r, inner_w = replay(tool_call(), GROUNDED), replay(SUMMARY)
    client_r = GroundlensChatCompletionClient(inner_r, agent_name="researcher", recorder=recorder)
    client_w = GroundlensChatCompletionClient(inner_w, agent_name="writer", recorder=recorder)
    with groundlens_trace(recorder, "team run") as key:
        result = await team(client_r, client_w).run(task=TASK)

    # the team saw exactly what the scripted models said
    texts = [m.content for m in result.messages if isinstance(m, TextMessage)]
    assert texts == [TASK, GROUNDED, SUMMARY]
    assert len(inner_r.create_calls) == 2 and len(inner_w.create_calls) == 1

    trace = recorder.get_trace(key)
    assert trace.name == "team run" and trace.ended_at is not None
    assert shape(trace) == [("researcher", "tool_call", "skipped"), ("researcher", "llm", "sgi"),
                            ("writer", "llm", "sgi")]
    call, answer, summary = trace.steps
    assert call.skip_reason and call.metadata["calls"] == ["city_facts"]
    assert answer.question == summary.question == TASK
    assert [(c.source, c.text) for c in answer.context] == [("tool:city_facts", FACTS)]
    assert [(c.source, c.text) for c in summary.context] == [("agent:researcher", GROUNDED)]
    assert answer.triage == "trusted"
    assert answer.usage.input_tokens is not None and answer.provider == "ReplayChatCompletionClient"
    assert answer.llm_latency_ms is not None


async def test_grounded_answer_outranks_ungrounded_one(calibration):
    scores = {}
    for answer in (GROUNDED, OFF_TOPIC):
        client = GroundlensChatCompletionClient(replay(tool_call(), answer), agent_name="researcher",
                                                calibration=calibration)
        result = await researcher(client).run(task=TASK)
        assert result.messages[-1].content == answer
        scores[answer] = client.get_trace().steps[-1]
    assert scores[GROUNDED].method == scores[OFF_TOPIC].method == "sgi"
    assert scores[GROUNDED].value > scores[OFF_TOPIC].value


async def test_dgi_without_context_and_plain_last_user_message_rule(calibration):
    client = GroundlensChatCompletionClient(replay("The capital of France is Paris."), agent_name="geo",
                                            calibration=calibration)
    await AssistantAgent("geo", model_client=client).run(task="What is the capital of France?")
    (step,) = client.get_trace().steps
    assert step.method == "dgi" and step.context == () and step.question == "What is the capital of France?"

    # question_sources=None: the question is simply the last user message, whoever sent it
    recorder = Recorder("autogen", calibration=calibration)
    plain = GroundlensChatCompletionClient(replay(SUMMARY), agent_name="writer", recorder=recorder,
                                           question_sources=None)
    await plain.create([UserMessage(content=TASK, source="user"), UserMessage(content=GROUNDED, source="researcher")])
    (step,) = plain.get_trace().steps
    assert step.question == GROUNDED and step.method == "dgi"


async def test_streaming_create_is_passed_through_and_recorded(calibration):
    client = GroundlensChatCompletionClient(replay(tool_call(), GROUNDED), agent_name="researcher",
                                            calibration=calibration)
    agent = AssistantAgent("researcher", model_client=client, tools=[city_facts], reflect_on_tool_use=True,
                           model_client_stream=True)
    result = await agent.run(task=TASK)
    assert result.messages[-1].content == GROUNDED
    steps = client.get_trace().steps
    assert [(s.kind, s.method) for s in steps] == [("tool_call", "skipped"), ("llm", "sgi")]
    assert all(s.metadata.get("streaming") for s in steps)


async def test_wrapper_delegates_everything_else(calibration):
    inner = replay("The capital of France is Paris.")
    client = GroundlensChatCompletionClient(inner, agent_name="geo", calibration=calibration)
    assert isinstance(client, ChatCompletionClient)
    assert client.model_info == inner.model_info and client.model_info["function_calling"] is True
    msgs = [UserMessage(content="What is the capital of France?", source="user")]
    assert client.count_tokens(msgs) == inner.count_tokens(msgs)
    result = await client.create(msgs)
    assert result.content == "The capital of France is Paris."
    assert client.total_usage() == inner.total_usage() and client.actual_usage() == inner.actual_usage()
    assert client.remaining_tokens(msgs) == inner.remaining_tokens(msgs)
    client.reset()  # not part of the interface: reached through the wrapped client
    assert (await client.create(msgs)).content == "The capital of France is Paris."
    await client.close()

    loaded = ChatCompletionClient.load_component(client.dump_component())
    assert isinstance(loaded, GroundlensChatCompletionClient) and loaded.agent_name == "geo"
    assert isinstance(loaded.wrapped, ReplayChatCompletionClient)


async def test_a_failing_model_call_propagates_unchanged_and_is_recorded(calibration):
    client = GroundlensChatCompletionClient(replay(), agent_name="geo", calibration=calibration)
    with pytest.raises(ValueError, match="No more mock responses"):
        await client.create([UserMessage(content=TASK, source="user")])
    (step,) = client.get_trace().steps
    assert step.method == "error" and "No more mock responses" in step.error


# ---------------------------------------------------------------- the checker


async def test_checker_over_a_task_result(calibration):
    result = await scripted_team_result()
    trace = GroundlensChecker(calibration=calibration).check(result)
    assert shape(trace) == [("researcher", "tool_call", "skipped"), ("city_facts", "tool", "skipped"),
                            ("researcher", "llm", "sgi"), ("writer", "llm", "sgi")]
    _, tool, answer, summary = trace.steps
    assert tool.response == FACTS and tool.metadata["agent"] == "researcher"
    assert answer.question == summary.question == TASK
    assert [c.source for c in answer.context] == ["tool:city_facts"]
    assert [c.source for c in summary.context] == ["tool:city_facts", "agent:researcher"]
    assert trace.metadata["stop_reason"] == result.stop_reason
    assert trace.counts()["skipped"] == 2


async def test_steps_of_one_agent_turn_share_the_turn_as_parent(calibration):
    recorder = Recorder("autogen", calibration=calibration)
    client_r = GroundlensChatCompletionClient(replay(tool_call(), GROUNDED), agent_name="researcher", recorder=recorder)
    client_w = GroundlensChatCompletionClient(replay(SUMMARY), agent_name="writer", recorder=recorder)
    with groundlens_trace(recorder, "team run") as key:
        result = await team(client_r, client_w).run(task=TASK)
    # live, through the model clients: the researcher's tool turn and its answer after the tool ran
    call, answer, summary = recorder.get_trace(key).steps
    assert call.parent_id == answer.parent_id == f"turn:{call.id}"
    assert summary.parent_id == f"turn:{summary.id}"

    # after the run, from its messages: the turn is named by AutoGen's id of its first message
    request = next(m for m in result.messages if type(m).__name__ == "ToolCallRequestEvent")
    written = next(m for m in result.messages if isinstance(m, TextMessage) and m.source == "writer")
    trace = GroundlensChecker(calibration=calibration).check(result)
    assert [s.node for s in trace.steps] == ["researcher", "city_facts", "researcher", "writer"]
    assert [s.parent_id for s in trace.steps] == [f"turn:{request.id}"] * 3 + [f"turn:{written.id}"]


async def test_checker_ranks_the_ungrounded_run_lower(calibration):
    checker = GroundlensChecker(calibration=calibration)
    good = checker.check(await scripted_team_result(GROUNDED))
    bad = checker.check(await scripted_team_result(UNGROUNDED))
    assert good.id != bad.id
    good_answer, bad_answer = good.steps[2], bad.steps[2]
    assert good_answer.value > bad_answer.value
    assert bad_answer.triage == "flagged" and bad.riskiest(1)[0].id == bad_answer.id
    # the checker's steps carry the score that is ranked
    assert good_answer.score > bad_answer.score and bad_answer.score < 1 / 3
    assert f"researcher [score={bad_answer.score:.2f} flagged" in bad.summary()
    # the writer's context carries the flagged answer; its summary leans on the tool's facts, so it
    # keeps its own band (with the cascade mark)
    writer = bad.steps[3]
    assert writer.cascade_from == (bad_answer.id,) and writer.decision.rule != "grounded_in_flagged"


async def test_checker_follows_run_stream(calibration):
    checker = GroundlensChecker(calibration=calibration)
    the_team = team(replay(tool_call(), GROUNDED), replay(SUMMARY))
    stream = checker.check_stream(the_team.run_stream(task=TASK), name="streamed")
    items = [item async for item in stream]
    assert isinstance(items[-1], TaskResult)  # everything yielded through, the TaskResult last
    assert [type(i).__name__ for i in items[:-1]] == [type(m).__name__ for m in items[-1].messages]
    trace = stream.trace
    assert trace.name == "streamed" and trace.metadata["stop_reason"] == items[-1].stop_reason
    assert shape(trace) == shape(checker.check(items[-1]))

    # or simply awaited: consumes the stream and returns the trace
    awaited = await checker.check_stream(team(replay(tool_call(), GROUNDED), replay(SUMMARY)).run_stream(task=TASK))
    assert shape(awaited) == shape(trace) and awaited.id != trace.id


async def test_checking_a_long_finished_run_waits_for_the_queue_instead_of_dropping(calibration):
    """A finished run of 120 answers checked with a scoring queue of 4 steps and 1 KB: the checker
    hands its calls over as fast as the worker scores them, so every answer is scored (74 of 120 were
    recorded as ``overload``); a live recorder with the same bounds still never waits."""
    n = 60
    researcher_says = [f"Paris has about 2.1 million inhabitants (estimate {i})." for i in range(n)]
    writer_says = [f"In short: about 2.1 million people live in Paris (summary {i})." for i in range(n)]
    the_team = RoundRobinGroupChat(
        [AssistantAgent("researcher", model_client=replay(*researcher_says)),
         AssistantAgent("writer", model_client=replay(*writer_says))],
        termination_condition=MaxMessageTermination(2 * n + 1),
    )
    result = await the_team.run(task=TASK)
    assert len(result.messages) == 2 * n + 1

    checker = GroundlensChecker(calibration=calibration, agent_messages_as_context=False)
    checker.recorder.max_pending_steps, checker.recorder.max_pending_bytes = 4, 1024
    trace = checker.check(result)
    assert len(trace.steps) == 2 * n
    assert trace.unscored() == {"overload": 0, "pending": 0} and checker.recorder.stats["overload"] == 0
    assert {s.method for s in trace.steps} == {"dgi"}
    assert [s.response for s in trace.steps[:2]] == [researcher_says[0], writer_says[0]]

    # the live path (a stream followed while the team runs) never waits: with the worker held inside
    # a batch the run still streams through at once, the calls past the bounds marked ``overload``
    live = GroundlensChecker(calibration=calibration, agent_messages_as_context=False)
    live.recorder.max_pending_steps, live.recorder.max_pending_bytes = 4, 1024
    entered, gate = threading.Event(), threading.Event()
    process = live.recorder._worker.process

    def held(items):
        entered.set()
        gate.wait(120)  # bounded
        return process(items)

    live.recorder._worker.process = held
    stream_team = RoundRobinGroupChat(
        [AssistantAgent("researcher", model_client=replay(*researcher_says)),
         AssistantAgent("writer", model_client=replay(*writer_says))],
        termination_condition=MaxMessageTermination(2 * n + 1),
    )
    stream = live.check_stream(stream_team.run_stream(task=TASK))
    try:
        items = await asyncio.wait_for(_all(stream), timeout=60)
        assert not gate.is_set()  # the whole run passed while the worker was held
    finally:
        gate.set()
    assert len(items) == 2 * n + 2  # the task, the answers, the TaskResult
    streamed = stream.trace
    assert len(streamed.steps) == 2 * n and streamed.unscored()["overload"] >= 2 * n - 8


async def _all(stream) -> list:
    return [item async for item in stream]


def test_messages_without_text_are_skipped_never_raised(calibration):
    image = Image.from_base64(  # a 1x1 PNG
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    messages = [
        TextMessage(content=TASK, source="user"),
        ToolCallExecutionEvent(content=[], source="researcher"),  # an empty tool turn
        MultiModalMessage(content=["Here is a chart of Paris.", image], source="researcher"),
        TextMessage(content="   ", source="writer"),
        TextMessage(content=GROUNDED, source="writer"),
    ]
    trace = GroundlensChecker(calibration=calibration).check_messages(messages)
    assert shape(trace) == [("researcher", "llm", "skipped"), ("writer", "llm", "skipped"), ("writer", "llm", "dgi")]
    assert trace.steps[0].metadata["message_type"] == "MultiModalMessage"
    assert trace.steps[0].skip_reason and trace.steps[1].skip_reason


# ---------------------------------------------------------------- the termination condition


async def test_termination_stops_the_team_on_a_flagged_answer(calibration):
    write_client = replay(SUMMARY)
    condition = GroundlensFlaggedTermination(calibration=calibration)
    assert isinstance(condition, TerminationCondition) and issubclass(GroundlensFlaggedTermination, TerminationCondition)
    the_team = RoundRobinGroupChat([researcher(replay(tool_call(), UNGROUNDED)), writer(write_client)],
                                   termination_condition=MaxMessageTermination(6) | condition)
    result = await the_team.run(task=TASK)

    assert "groundlens flagged the answer of researcher" in result.stop_reason
    assert result.messages[-1].content == UNGROUNDED  # stopped right after the flagged answer
    assert write_client.create_calls == []  # the writer never ran
    assert condition.last_trigger["node"] == "researcher" and condition.last_trigger["result"]["triage"] == "flagged" and "score" not in condition.last_trigger
    trace = condition.get_trace()
    assert trace.ended_at is not None  # the team reset the condition, which closes the run's trace
    assert shape(trace) == [("researcher", "tool_call", "skipped"), ("city_facts", "tool", "skipped"),
                            ("researcher", "llm", "sgi")]
    assert trace.steps[-1].id == condition.last_trigger["step_id"]
    assert not condition.terminated  # reset by the team, ready for the next run


async def test_termination_lets_grounded_runs_and_other_sources_finish(calibration):
    grounded = GroundlensFlaggedTermination(calibration=calibration)
    result = await team(replay(tool_call(), GROUNDED), replay(SUMMARY), grounded).run(task=TASK)
    assert result.stop_reason.startswith("Maximum number of messages")
    assert grounded.last_trigger is None

    writer_only = GroundlensFlaggedTermination(calibration=calibration, sources=["writer"])
    result = await team(replay(tool_call(), UNGROUNDED), replay(SUMMARY), writer_only).run(task=TASK)
    assert result.stop_reason.startswith("Maximum number of messages")  # the researcher may not stop it
    assert writer_only.get_trace().counts()["flagged"] >= 1


async def test_termination_refuses_unknown_bands_and_raises_once_terminated(calibration):
    with pytest.raises(ValueError, match="stop_on"):
        GroundlensFlaggedTermination(stop_on=["bad"])
    condition = GroundlensFlaggedTermination(calibration=calibration)
    facts = FunctionExecutionResult(content=FACTS, name="city_facts", call_id="call-1", is_error=False)
    stop = await condition([TextMessage(content=TASK, source="user"),
                            ToolCallExecutionEvent(content=[facts], source="researcher"),
                            TextMessage(content=UNGROUNDED, source="researcher")])
    assert stop is not None and condition.terminated
    assert stop.source == "GroundlensFlaggedTermination" and "SGI=" in stop.content
    from autogen_agentchat.base import TerminatedException

    with pytest.raises(TerminatedException):
        await condition([TextMessage(content="again", source="researcher")])
    await condition.reset()
    assert not condition.terminated


# ---------------------------------------------------------------- failures


async def test_internal_failures_never_break_the_team(internal_errors_logged, monkeypatch, caplog):
    recorder = Recorder("autogen", embedder=BrokenEmbedder())
    client_r = GroundlensChatCompletionClient(replay(tool_call(), UNGROUNDED), agent_name="researcher", recorder=recorder)
    client_w = GroundlensChatCompletionClient(replay(SUMMARY), agent_name="writer", recorder=recorder)
    condition = GroundlensFlaggedTermination(embedder=BrokenEmbedder())
    result = await team(client_r, client_w, condition).run(task=TASK)
    # the run is exactly what it would be without groundlens: nothing stopped it early
    assert [m.content for m in result.messages if isinstance(m, TextMessage)] == [TASK, UNGROUNDED, SUMMARY]
    assert result.stop_reason.startswith("Maximum number of messages")
    for trace in (client_r.get_trace(), condition.get_trace()):
        assert [s.method for s in trace.steps if s.kind == "llm"] == ["error", "error"]
        assert "embedder exploded" in [s for s in trace.steps if s.kind == "llm"][0].error
    checked = GroundlensChecker(embedder=BrokenEmbedder()).check(result)
    assert checked.counts()["error"] == 2

    # a bug while reading a request: the model's result still comes back, an error step is kept
    def broken(*args, **kwargs):
        raise KeyError("bug")

    monkeypatch.setattr(ag_client, "request_question_and_context", broken)
    client = GroundlensChatCompletionClient(replay("Paris."), agent_name="geo", recorder=Recorder("autogen"))
    assert (await client.create([UserMessage(content=TASK, source="user")])).content == "Paris."
    (step,) = client.get_trace().steps
    assert step.method == "error" and "could not read" in step.error
    assert any("could not record" in r.getMessage() for r in caplog.records)


def test_missing_framework_gives_the_install_hint(monkeypatch):
    monkeypatch.setattr(ag, "_built", {})
    for name in ("autogen_agentchat", "autogen_agentchat.messages", "autogen_agentchat.base", "autogen_core",
                 "autogen_core.models"):
        monkeypatch.setitem(sys.modules, name, None)  # as if AutoGen were not installed
    with pytest.raises(ImportError, match=r"groundlens-core\[autogen\]"):
        GroundlensChecker()
    with pytest.raises(ImportError, match=r"groundlens-core\[autogen\]"):
        ag.GroundlensFlaggedTermination  # noqa: B018 - built on first access
    with pytest.raises(ImportError, match=r"groundlens-core\[autogen\]"):
        from groundlens_core.plugins.autogen import GroundlensChatCompletionClient as _  # noqa: F401


async def test_termination_reset_starts_a_fresh_conversation():
    """A team run twice: the second run's answers are scored against the second task, not the first."""
    cond = GroundlensFlaggedTermination(question_sources=None, stop_on=["flagged"])
    team = RoundRobinGroupChat(
        [researcher(replay(tool_call(), GROUNDED, "Rome is the capital of Italy.")), writer(replay(SUMMARY, "Italy's capital is Rome."))],
        termination_condition=MaxMessageTermination(3) | cond)
    await team.run(task=TASK)
    await team.run(task="What is the capital of Italy?")
    traces = cond.recorder.get_traces()
    assert len(traces) == 2
    second = [s for s in traces[1].steps if s.kind == "llm"]
    assert second and all(s.question == "What is the capital of Italy?" for s in second)
    assert all(s.node != "user" for s in second)  # the new task is not scored as an answer
    assert all(not any(p.source.startswith("tool:") for p in s.context) for s in second)  # no context from run 1


def test_termination_config_round_trip_keeps_every_option():
    cond = GroundlensFlaggedTermination(
        stop_on=["flagged", "review"], sources=["writer"], question_sources=["user", "lead"],
        agent_messages_as_context=False)
    config = cond.dump_component()
    assert config.config == {"stop_on": ["flagged", "review"], "sources": ["writer"],
                             "question_sources": ["user", "lead"], "agent_messages_as_context": False}
    loaded = TerminationCondition.load_component(config)
    assert isinstance(loaded, GroundlensFlaggedTermination)
    assert (loaded.stop_on, loaded.sources) == (("flagged", "review"), ("writer",))
    assert (loaded.question_sources, loaded.agent_messages_as_context) == (("user", "lead"), False)
