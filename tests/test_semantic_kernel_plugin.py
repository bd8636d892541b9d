"""The Semantic Kernel filter against a real Kernel, a scripted chat service and the real embedding model.

The scripted service goes through SK's own automatic function calling loop: it first answers with a
FunctionCallContent, SK invokes the native plugin (through our filter), then the service answers
with text. Scores are compared by relation, never against numbers copied from a run.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, ClassVar

import pytest

pytest.importorskip("semantic_kernel")

from pydantic import Field  # noqa: E402
from semantic_kernel import Kernel  # noqa: E402
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase  # noqa: E402
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior  # noqa: E402
from semantic_kernel.connectors.ai.prompt_execution_settings import PromptExecutionSettings  # noqa: E402
from semantic_kernel.contents import (  # noqa: E402
    AuthorRole,
    ChatHistory,
    ChatMessageContent,
    FunctionCallContent,
    StreamingChatMessageContent,
)
from semantic_kernel.filters import FilterTypes  # noqa: E402
from semantic_kernel.functions import KernelArguments, kernel_function  # noqa: E402
from semantic_kernel.prompt_template import InputVariable, PromptTemplateConfig  # noqa: E402

from groundlens_core.plugins.semantic_kernel import DEFAULT_REPLACEMENT, GroundlensFilter, GroundlensFlaggedError  # noqa: E402
from groundlens_core.trace.model import ContextPiece  # noqa: E402
from groundlens_core.trace.recorder import CallRecord, Recorder  # noqa: E402

QUESTION = "What is the population of Paris?"
FACTS = "Paris is the capital of France and has about 2.1 million inhabitants."
GROUNDED = "Paris has about 2.1 million inhabitants and is the capital of France."
OFF_TOPIC = "I enjoy playing tennis on sunny weekends with my friends."
# near the question, far from the tool's facts: SGI well under the review mark
UNGROUNDED = "Paris population statistics: the number of residents living in Paris."


class ScriptedChat(ChatCompletionClientBase):
    """A chat service that replays a script; supports SK's automatic function calling."""

    SUPPORTS_FUNCTION_CALLING: ClassVar[bool] = True
    script: list = Field(default_factory=list)
    histories: list = Field(default_factory=list)

    async def _inner_get_chat_message_contents(self, chat_history, settings) -> list[ChatMessageContent]:
        self.histories.append([m.role for m in chat_history.messages])
        item = self.script.pop(0)
        if isinstance(item, FunctionCallContent):
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=[item], ai_model_id=self.ai_model_id)]
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, content=item, ai_model_id=self.ai_model_id,
                                   metadata={"usage": {"prompt_tokens": 12, "completion_tokens": 9}})]

    async def _inner_get_streaming_chat_message_contents(self, chat_history, settings, function_invoke_attempt=0):
        text = self.script.pop(0)
        for word in text.split(" "):
            yield [StreamingChatMessageContent(role=AuthorRole.ASSISTANT, content=word + " ", choice_index=0,
                                               ai_model_id=self.ai_model_id)]

    def _update_function_choice_settings_callback(self):
        return lambda configuration, settings, choice_type: None

    def _reset_function_choice_settings(self, settings) -> None:
        return None


class CityLookup:
    calls = 0

    @kernel_function(name="city_facts", description="Facts about a city.")
    def city_facts(self, city: str) -> str:
        CityLookup.calls += 1
        return FACTS if city == "Paris" else f"No facts about {city}."


from conftest import BrokenEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def calibration(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


def make_kernel(script: list, guard: GroundlensFilter, *, tools: bool = True, prompt: str = "Answer: {{$input}}",
                config: PromptTemplateConfig | None = None):
    kernel = Kernel()
    kernel.add_service(ScriptedChat(service_id="chat", ai_model_id="scripted-1", script=list(script)))
    if tools:
        kernel.add_plugin(CityLookup(), "lookup")
    kernel.add_filter(FilterTypes.FUNCTION_INVOCATION, guard)
    settings = PromptExecutionSettings(service_id="chat")
    if tools:
        settings.function_choice_behavior = FunctionChoiceBehavior.Auto()
    if config is not None:
        config.execution_settings = {"chat": settings}
        answer = kernel.add_function(plugin_name="qa", function_name="answer", prompt_template_config=config)
    else:
        answer = kernel.add_function(plugin_name="qa", function_name="answer", prompt=prompt,
                                     prompt_execution_settings=settings)
    return kernel, answer


def tool_script(answer: str) -> list:
    return [FunctionCallContent(id="call-1", name="lookup-city_facts", arguments='{"city": "Paris"}'), answer]


async def run_answer(answer: str, guard: GroundlensFilter):
    kernel, fn = make_kernel(tool_script(answer), guard)
    return await kernel.invoke(fn, KernelArguments(input=QUESTION))


# ---------------------------------------------------------------- scoring


async def test_grounded_answer_outranks_ungrounded_with_tool_result_as_context(calibration):
    guard = GroundlensFilter(calibration=calibration)
    good = await run_answer(GROUNDED, guard)
    good_trace = guard.get_trace()
    bad = await run_answer(OFF_TOPIC, guard)
    bad_trace = guard.get_trace()

    assert str(good) == GROUNDED and str(bad) == OFF_TOPIC  # annotate mode leaves answers alone
    good_score, bad_score = good.metadata["groundlens"], bad.metadata["groundlens"]
    assert good_score["method"] == bad_score["method"] == "sgi"
    assert good_score["value"] > bad_score["value"]
    assert good_score["triage"] == "trusted"
    # the metadata carries the score that is ranked, and why, as data
    assert good_score["score"] > bad_score["score"] and "rank" not in good_score
    assert good_score["decision"]["rule"] == "grounded" and good_score["decision"]["score"] == good_score["score"]

    assert good_trace.id != bad_trace.id  # one trace per top-level invoke
    for trace, score in ((good_trace, good_score), (bad_trace, bad_score)):
        assert [(s.node, s.kind, s.method) for s in trace.steps] == [
            ("lookup-city_facts", "tool", "skipped"), ("qa-answer", "llm", "sgi")]
        tool, llm = trace.steps
        assert llm.result.to_dict() == score  # the step keeps exactly the score handed back in the metadata
        assert llm.question == QUESTION
        assert [(c.source, c.text) for c in llm.context] == [("tool:lookup-city_facts", FACTS)]
        assert tool.parent_id == llm.id  # the native call ran inside the prompt function
        assert tool.response == FACTS and tool.result is None
        assert llm.model == "scripted-1" and llm.usage.input_tokens == 12 and llm.usage.output_tokens == 9
        assert llm.scoring_latency_ms is not None and llm.scoring_latency_ms > 0
        assert trace.framework == "semantic_kernel" and trace.ended_at is not None


async def test_dgi_when_the_prompt_function_has_no_context(calibration):
    guard = GroundlensFilter(calibration=calibration)
    kernel, fn = make_kernel(["The capital of France is Paris."], guard, tools=False)
    result = await kernel.invoke(fn, KernelArguments(input="What is the capital of France?"))
    score = result.metadata["groundlens"]
    assert score["method"] == "dgi" and score["triage"] in ("trusted", "review", "flagged")
    (step,) = guard.get_trace().steps
    assert step.method == "dgi" and step.context == () and step.question == "What is the capital of France?"
    assert step.metadata["question_source"] == "argument:input"


async def test_context_argument_is_used_as_context(calibration):
    guard = GroundlensFilter(calibration=calibration)
    kernel, fn = make_kernel([GROUNDED], guard, tools=False, prompt="Context: {{$context}}\nQuestion: {{$input}}")
    result = await kernel.invoke(fn, KernelArguments(input=QUESTION, context=FACTS))
    assert result.metadata["groundlens"]["method"] == "sgi"
    (step,) = guard.get_trace().steps
    assert [(c.source, c.text) for c in step.context] == [("argument:context", FACTS)]


async def test_question_from_chat_history_when_no_question_argument(calibration):
    guard = GroundlensFilter(calibration=calibration)
    config = PromptTemplateConfig(template="{{$history}}", input_variables=[
        InputVariable(name="history", allow_dangerously_set_content=True)])  # SK's usual chat pattern
    kernel, fn = make_kernel(["The capital of France is Paris."], guard, tools=False, config=config)
    history = ChatHistory()
    history.add_system_message("You answer geography questions.")
    history.add_user_message("Which city is the capital of France?")
    await kernel.invoke(fn, KernelArguments(history=history))
    (step,) = guard.get_trace().steps
    assert step.question == "Which city is the capital of France?"
    assert step.metadata["question_source"] == "chat_history"
    assert step.method == "dgi"


async def test_native_outputs_are_tool_steps_and_context_for_later_prompt_functions(calibration):
    guard = GroundlensFilter(calibration=calibration)
    kernel, answer = make_kernel([GROUNDED], guard, tools=False)
    kernel.add_plugin(CityLookup(), "lookup")  # callable directly, not offered to the model
    before = CityLookup.calls
    with guard.trace("lookup then answer") as key:
        facts = await kernel.invoke(plugin_name="lookup", function_name="city_facts", city="Paris")
        result = await kernel.invoke(answer, KernelArguments(input=QUESTION))
    assert str(facts) == FACTS and CityLookup.calls == before + 1
    assert "groundlens" not in facts.metadata  # native results are never annotated

    trace = guard.get_trace(key)
    assert trace.name == "lookup then answer"
    assert [(s.kind, s.method) for s in trace.steps] == [("tool", "skipped"), ("llm", "sgi")]
    tool, llm = trace.steps
    assert tool.skip_reason and "context" in tool.skip_reason
    assert tool.metadata["function_kind"] == "native" and tool.metadata["arguments"]["city"] == "Paris"
    assert [c.source for c in llm.context] == ["tool:lookup-city_facts"]
    assert result.metadata["groundlens"]["value"] == llm.value

    # outside the trace, the next invocation starts fresh: no context carried over
    kernel.get_service("chat").script.append(GROUNDED)
    await kernel.invoke(answer, KernelArguments(input=QUESTION))
    assert guard.get_trace().steps[0].method == "dgi"


class Pipeline:
    """A native function that runs the prompt function itself: the LLM call nests inside it."""

    def __init__(self, kernel, answer):
        self.kernel, self.answer = kernel, answer

    @kernel_function(name="research", description="Looks the question up and answers it.")
    async def research(self, question: str) -> str:
        return str(await self.kernel.invoke(self.answer, KernelArguments(input=question, context=FACTS)))


async def test_a_prompt_function_called_by_another_function_hangs_under_it(calibration):
    guard = GroundlensFilter(calibration=calibration)
    kernel, answer = make_kernel([GROUNDED], guard, tools=False)
    kernel.add_plugin(Pipeline(kernel, answer), "pipeline")
    out = await kernel.invoke(plugin_name="pipeline", function_name="research", question=QUESTION)
    assert str(out) == GROUNDED
    trace = guard.get_trace()
    assert [(s.node, s.kind) for s in trace.steps] == [("qa-answer", "llm"), ("pipeline-research", "tool")]
    llm, outer = trace.steps
    assert llm.parent_id == outer.id and outer.parent_id is None  # function -> LLM call
    assert llm.method == "sgi"


async def test_streaming_invocation_is_recorded_and_scored_after_the_stream(calibration):
    guard = GroundlensFilter(calibration=calibration)
    kernel, fn = make_kernel([GROUNDED], guard, tools=False, prompt="Context: {{$context}}\nQuestion: {{$input}}")
    chunks = [c async for c in kernel.invoke_stream(fn, KernelArguments(input=QUESTION, context=FACTS))]
    assert "".join(str(c[0]) for c in chunks).strip() == GROUNDED
    (step,) = guard.get_trace().steps
    assert step.method == "sgi" and step.response.strip() == GROUNDED and step.metadata["streaming"] is True


# ---------------------------------------------------------------- guard modes


async def test_annotate_mode_keeps_a_flagged_answer(calibration):
    guard = GroundlensFilter(calibration=calibration)
    result = await run_answer(UNGROUNDED, guard)
    assert str(result) == UNGROUNDED
    assert result.metadata["groundlens"]["triage"] == "flagged"
    assert guard.get_trace().counts()["flagged"] == 1


async def test_replace_mode_swaps_only_flagged_answers(calibration):
    guard = GroundlensFilter(calibration=calibration, mode="replace")
    flagged = await run_answer(UNGROUNDED, guard)
    assert str(flagged) == DEFAULT_REPLACEMENT
    assert flagged.metadata["groundlens"]["triage"] == "flagged"
    kept = flagged.metadata["groundlens_guard"]
    assert kept["action"] == "replaced" and kept["original_response"] == UNGROUNDED
    assert str(kept["original_value"][0]) == UNGROUNDED
    step = guard.get_trace().steps[-1]
    assert step.response == UNGROUNDED and step.metadata["guard"] == "replaced"

    custom = GroundlensFilter(calibration=calibration, mode="replace", replacement="Held for review.")
    assert str(await run_answer(UNGROUNDED, custom)) == "Held for review."
    trusted = await run_answer(GROUNDED, custom)
    assert str(trusted) == GROUNDED and "groundlens_guard" not in trusted.metadata


async def test_raise_mode_raises_only_for_flagged_answers(calibration):
    guard = GroundlensFilter(calibration=calibration, mode="raise")
    with pytest.raises(Exception) as info:
        await run_answer(UNGROUNDED, guard)
    err = GroundlensFlaggedError.find(info.value)  # kernel.invoke wraps it in KernelInvokeException
    assert err is not None
    assert err.result.triage == "flagged" and err.response == UNGROUNDED and err.function_name == "qa-answer"
    trace = guard.get_trace()
    assert trace.steps[-1].metadata["guard"] == "raised" and trace.steps[-1].id == err.step_id
    assert trace.status == "error" and "GroundlensFlaggedError" in trace.error

    ok = await run_answer(GROUNDED, guard)
    assert str(ok) == GROUNDED and ok.metadata["groundlens"]["triage"] == "trusted"


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode"):
        GroundlensFilter(mode="block")


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("mode", ["annotate", "replace", "raise"])
async def test_internal_failure_never_breaks_the_kernel(internal_errors_logged, mode, caplog):
    guard = GroundlensFilter(embedder=BrokenEmbedder(), mode=mode)
    result = await run_answer(UNGROUNDED, guard)  # would be flagged if scoring worked
    assert str(result) == UNGROUNDED  # passes through untouched, no exception, in every mode
    assert "groundlens" not in result.metadata
    trace = guard.get_trace()
    assert [(s.kind, s.method) for s in trace.steps] == [("tool", "skipped"), ("llm", "error")]
    assert "embedder exploded" in trace.steps[-1].error
    assert any("could not score" in r.getMessage() for r in caplog.records)


async def test_a_failing_function_is_recorded_and_its_error_propagates_unchanged(calibration):
    guard = GroundlensFilter(calibration=calibration)
    kernel, fn = make_kernel([], guard, tools=False)  # empty script: the service raises IndexError
    with pytest.raises(Exception) as info:
        await kernel.invoke(fn, KernelArguments(input=QUESTION))
    assert GroundlensFlaggedError.find(info.value) is None
    trace = guard.get_trace()
    (step,) = trace.steps
    assert step.method == "error" and "the function raised" in step.error
    assert trace.status == "error"


def test_recorder_keeps_a_precomputed_score_instead_of_rescoring():
    # the broken embedder proves the recorder does not score the call again
    recorder = Recorder("test", embedder=BrokenEmbedder())
    score = {"method": "sgi", "value": 1.5, "normalized": 0.83, "flagged": False, "triage": "trusted",
             "explanation": "x", "fingerprint": "fp", "backend": "b", "version": "v"}
    recorder.record(CallRecord(trace_key="t", node="n", question="q?", response="r.", result=score,
                               scoring_latency_ms=4.0, context=[ContextPiece("c", "tool:x")]))
    recorder.record(CallRecord(trace_key="t", node="m", question="q?", response="r."))  # no score: rescored
    first, second = recorder.get_trace("t").steps
    assert first.method == "sgi" and {k: v for k, v in first.result.to_dict().items() if k in score} == score and first.scoring_latency_ms == 4.0
    assert recorder.get_trace("t").fingerprint == "fp"
    assert second.method == "error" and "embedder exploded" in second.error


def test_missing_framework_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "semantic_kernel", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"groundlens-core\[semantic-kernel\]"):
        GroundlensFilter()


class _SlowChat(ScriptedChat):
    """Hangs on a scripted "SLOW" turn (setting ``slow_turn`` when it gets there), so the caller's
    timeout cancels the invocation in the middle of that model call."""

    slow_turn: Any = None  # an asyncio.Event

    async def _inner_get_chat_message_contents(self, chat_history, settings):
        if self.script and self.script[0] == "SLOW":
            self.script.pop(0)
            self.slow_turn.set()
            await asyncio.sleep(600)
        return await super()._inner_get_chat_message_contents(chat_history, settings)


async def test_cancelled_invoke_ends_its_trace_and_leaks_nothing():
    from groundlens_core.plugins.semantic_kernel import _RUN

    guard = GroundlensFilter()
    kernel, fn = make_kernel([], guard)
    kernel.remove_all_services()
    slow_turn = asyncio.Event()
    kernel.add_service(_SlowChat(service_id="chat", ai_model_id="scripted-1", slow_turn=slow_turn,
                                 script=tool_script("SLOW") + ["An unrelated second answer about Rome."]))

    async def time_out_on_the_slow_turn(deadline: asyncio.Timeout) -> None:
        await slow_turn.wait()
        deadline.reschedule(asyncio.get_running_loop().time())  # the caller's timeout expires now

    # The timeout expires once the run is inside its slow model call (after the tool result), not
    # after a fixed 0.5 s, which a loaded machine could spend before the run even started.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(120) as deadline:
            expire = asyncio.create_task(time_out_on_the_slow_turn(deadline))
            await kernel.invoke(fn, KernelArguments(input=QUESTION))
    expire.cancel()
    assert slow_turn.is_set()  # it was cancelled in the middle of the model call
    assert _RUN.get() is None  # the cancelled run no longer owns this task's context
    await kernel.invoke(fn, KernelArguments(input="What is the capital of Italy?"))
    first, second = guard.get_traces()
    assert first.status == "error" and first.ended_at is not None
    answer = [s for s in second.steps if s.kind == "llm"][-1]
    assert answer.method == "dgi" and answer.context == ()  # no Paris facts from the cancelled run
