"""Score Semantic Kernel prompt functions with a function-invocation filter. Runs offline.

A scripted chat service stands in for a real one (OpenAIChatCompletion, AzureChatCompletion...): it
asks SK to call a native ``lookup`` plugin through automatic function calling, then answers. The
filter scores each answer against the tool result (SGI; DGI when there is no context), attaches the
score to ``result.metadata["groundlens"]``, and, in the guard modes, replaces or refuses a flagged
answer.

    pip install "groundlens-core[semantic-kernel]"
    python examples/semantic_kernel_filter.py

The scores are triage signals that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from pydantic import Field
from semantic_kernel import Kernel
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.prompt_execution_settings import PromptExecutionSettings
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent
from semantic_kernel.filters import FilterTypes
from semantic_kernel.functions import KernelArguments, kernel_function

from groundlens_core.plugins.semantic_kernel import GroundlensFilter, GroundlensFlaggedError

QUESTION = "What is the population of Paris?"


class ScriptedChat(ChatCompletionClientBase):
    """Replays a script; a FunctionCallContent makes SK invoke the named kernel function."""

    SUPPORTS_FUNCTION_CALLING: ClassVar[bool] = True
    script: list = Field(default_factory=list)

    async def _inner_get_chat_message_contents(self, chat_history, settings):
        item = self.script.pop(0)
        if isinstance(item, FunctionCallContent):
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=[item], ai_model_id=self.ai_model_id)]
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, content=item, ai_model_id=self.ai_model_id)]

    def _update_function_choice_settings_callback(self):
        return lambda configuration, settings, choice_type: None

    def _reset_function_choice_settings(self, settings) -> None:
        return None


class Lookup:
    @kernel_function(name="city_facts", description="Facts about a city.")
    def city_facts(self, city: str) -> str:
        return "Paris is the capital of France and has about 2.1 million inhabitants."


def build(answer: str, guard: GroundlensFilter, *, tools: bool = True):
    kernel = Kernel()
    script: list = [answer]
    if tools:
        script.insert(0, FunctionCallContent(id="call-1", name="lookup-city_facts", arguments='{"city": "Paris"}'))
        kernel.add_plugin(Lookup(), "lookup")
    kernel.add_service(ScriptedChat(service_id="chat", ai_model_id="scripted", script=script))
    kernel.add_filter(FilterTypes.FUNCTION_INVOCATION, guard)
    settings = PromptExecutionSettings(service_id="chat")
    if tools:
        settings.function_choice_behavior = FunctionChoiceBehavior.Auto()
    fn = kernel.add_function(plugin_name="qa", function_name="answer", prompt="Answer: {{$input}}",
                             prompt_execution_settings=settings)
    return kernel, fn


def show(guard: GroundlensFilter) -> None:
    trace = guard.get_trace()
    print("   trace:", trace.summary())
    for step in trace.steps:
        sources = ", ".join(c.source for c in step.context) or "-"
        print(f"     #{step.index} {step.node:<18} {step.kind:<9} {step.label:<22} context: {sources}")


async def main() -> None:
    print("1. annotate (default): a grounded answer, scored against the tool result")
    guard = GroundlensFilter()
    kernel, fn = build("Paris has about 2.1 million inhabitants and is the capital of France.", guard)
    result = await kernel.invoke(fn, KernelArguments(input=QUESTION))
    score = result.metadata["groundlens"]
    print(f"   answer: {result}\n   score:  {score['method'].upper()}={score['value']:.2f} {score['triage']}")
    show(guard)

    print("\n2. no tools, no context: DGI")
    guard = GroundlensFilter()
    kernel, fn = build("The capital of France is Paris.", guard, tools=False)
    result = await kernel.invoke(fn, KernelArguments(input="What is the capital of France?"))
    show(guard)

    ungrounded = "Paris population statistics: the number of residents living in Paris."
    print("\n3. replace: a flagged answer is held back (the original stays in the metadata)")
    guard = GroundlensFilter(mode="replace")
    kernel, fn = build(ungrounded, guard)
    result = await kernel.invoke(fn, KernelArguments(input=QUESTION))
    print(f"   answer:   {result}")
    if "groundlens_guard" in result.metadata:
        print(f"   original: {result.metadata['groundlens_guard']['original_response']}")
    show(guard)

    print("\n4. raise: a flagged answer raises GroundlensFlaggedError")
    guard = GroundlensFilter(mode="raise")
    kernel, fn = build(ungrounded, guard)
    try:
        await kernel.invoke(fn, KernelArguments(input=QUESTION))
        print("   not flagged")
    except Exception as exc:  # kernel.invoke wraps it in KernelInvokeException
        err = GroundlensFlaggedError.find(exc)
        if err is None:
            raise
        print(f"   raised: {err}")
    show(guard)


if __name__ == "__main__":
    logging.getLogger("semantic_kernel").setLevel(logging.CRITICAL)  # SK logs the deliberate raise in 4. as an error
    asyncio.run(main())
