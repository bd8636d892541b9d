"""CrewAI for the tests, offline: importing this module switches crewai's telemetry, tracing and
version check off and imports crewai with HOME in a temporary folder (it reads paths under HOME as
it imports), then puts HOME back so other test modules see the real one. Test modules import
crewai's names from here; one that does is skipped where crewai is not installed.

OTEL_SDK_DISABLED is deliberately left alone: setting it would switch off our OTel exporter too.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Iterator

__all__ = [
    "CREWAI_HOME",
    "Agent",
    "BaseTool",
    "Crew",
    "InterceptionPoint",
    "ScriptedLLM",
    "Task",
    "action",
    "content_text",
    "crewai_home",
    "final",
    "get_hooks",
    "scripted",
    "tool",
]

import pytest

CREWAI_HOME = tempfile.mkdtemp(prefix="groundlens-crewai-home-")
atexit.register(shutil.rmtree, CREWAI_HOME, True)
os.environ.update(
    {
        "CREWAI_DISABLE_TELEMETRY": "true",
        "CREWAI_TRACING_ENABLED": "false",
        "CREWAI_DISABLE_VERSION_CHECK": "true",
        "CREWAI_STORAGE_DIR": "groundlens-tests",
    }
)


def _set_home(home: str | None) -> None:
    if home is None:
        os.environ.pop("HOME", None)
    else:
        os.environ["HOME"] = home


_REAL_HOME = os.environ.get("HOME")
_set_home(CREWAI_HOME)
try:  # the tests import crewai's names from here, so that they are never imported otherwise
    crewai = pytest.importorskip("crewai")
    from crewai import Agent, Crew, Task
    from crewai.hooks.dispatch import InterceptionPoint, get_hooks
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import BaseTool, tool
finally:
    _set_home(_REAL_HOME)


@pytest.fixture(scope="module", autouse=True)
def crewai_home() -> Iterator[str]:
    """Run the importing module's crews with HOME in the temporary folder (import it into the module)."""
    old = os.environ.get("HOME")
    _set_home(CREWAI_HOME)
    yield CREWAI_HOME
    _set_home(old)


def content_text(message: Any) -> str:
    """A chat message's content as text (structured content as JSON)."""
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", message)
    return content if isinstance(content, str) else json.dumps(content, default=str)


class ScriptedLLM(BaseLLM):
    """Returns its scripted replies in order and keeps each call's messages and tools; a callable
    reply sees the messages (so it can react to a tool's observation). ``native=True`` makes crewai
    use native function calling."""

    script: list = []
    native: bool = False
    calls: list = []

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None,
             from_agent=None, response_model=None):  # BaseLLM.call's signature
        self.calls.append({"messages": list(messages) if isinstance(messages, list) else messages, "tools": tools})
        if not self.script:
            raise AssertionError("scripted LLM ran out of replies")
        item = self.script.pop(0)
        return item(messages) if callable(item) else item

    def supports_function_calling(self) -> bool:
        return self.native

    def supports_stop_words(self) -> bool:
        return not self.native

    def get_context_window_size(self) -> int:
        return 16384

    def get_input_tokens_count(self, messages, *args, **kwargs) -> int:  # quiet crewai's estimate warning
        if not isinstance(messages, list):
            return len(str(messages)) // 4
        return sum(len(content_text(m)) for m in messages) // 4


def scripted(*replies: str | Callable[[Any], str], native: bool = False) -> ScriptedLLM:
    return ScriptedLLM(model="scripted-test-model", script=list(replies), native=native, calls=[])


def action(tool_name: str, args: dict) -> str:
    """A ReAct reply that calls ``tool_name`` with ``args``."""
    return f"Thought: I should use {tool_name}.\nAction: {tool_name}\nAction Input: {json.dumps(args)}"


def final(text: str) -> str:
    """A ReAct reply that answers ``text``."""
    return f"Thought: I now know the final answer\nFinal Answer: {text}"
