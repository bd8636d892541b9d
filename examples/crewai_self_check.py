"""A CrewAI agent that checks its own draft answer with groundlens before answering, offline.

The agent's LLM is scripted (no API key, no network): it looks a fact up, self-checks a draft that
ignores the source, reads the FLAGGED verdict, revises, self-checks again and answers. Every LLM
call of the crew is also scored by GroundlensCrewListener; the trace is written to
out/crewai_trace.json (and out/crewai_trace.html when the HTML exporter is available).

    python examples/crewai_self_check.py [--out DIR]

Scores are triage signals for ranking outputs for human review, never verdicts of truth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# CrewAI phones home and writes under $HOME: switch that off before importing it. (Never set
# OTEL_SDK_DISABLED: it would also switch off groundlens's own OpenTelemetry export.)
os.environ.update({
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
    "CREWAI_STORAGE_DIR": "groundlens-example",
    "HOME": tempfile.mkdtemp(prefix="groundlens-crewai-example-"),
})

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import tool  # noqa: E402

from groundlens_core.plugins.crewai import SELF_CHECK_TOOL_NAME, GroundlensCrewListener  # noqa: E402

QUESTION = "How tall is the Eiffel Tower? Answer with its height in metres."
SOURCE = "The Eiffel Tower in Paris is 330 metres tall, including its antennas. It was completed in 1889."
DRAFT = "I think the Eiffel Tower is very tall, maybe the tallest tower in metres."
REVISED = "The Eiffel Tower is about 330 metres tall, counting its antennas."


@tool("lookup")
def lookup(query: str) -> str:
    """Look up a fact about a Paris landmark by keyword (e.g. 'eiffel')."""
    return SOURCE if "eiffel" in query.lower() else "No fact found."


def _action(name: str, args: dict) -> str:
    return f"Thought: I should use {name}.\nAction: {name}\nAction Input: {json.dumps(args)}"


def _final(text: str) -> str:
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


def _last_observation(messages) -> str:
    for message in reversed(messages):
        text = message.get("content") if isinstance(message, dict) else None
        if isinstance(text, str) and "Observation:" in text:
            return text.split("Observation:", 1)[1]
    return ""


def _revise_if_flagged(messages) -> str:
    """What a careful model does with the self-check's verdict."""
    if "FLAGGED" in _last_observation(messages):
        return _action(SELF_CHECK_TOOL_NAME, {"answer": REVISED})
    return _final(DRAFT)


class ScriptedLLM(BaseLLM):
    """Plays back a fixed ReAct conversation; a callable reply reacts to the messages so far."""

    script: list = []

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None,
             from_agent=None, response_model=None):
        item = self.script.pop(0)
        return item(messages) if callable(item) else item

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return 16384

    def get_input_tokens_count(self, messages, *args, **kwargs) -> int:
        return sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict)) // 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for crewai_trace.json (default: out)")
    args = parser.parse_args(argv)

    llm = ScriptedLLM(model="scripted-example", script=[
        _action("lookup", {"query": "eiffel"}),
        _action(SELF_CHECK_TOOL_NAME, {"answer": DRAFT}),
        _revise_if_flagged,
        _final(REVISED),
    ])
    from groundlens_core import evaluate

    started = time.perf_counter()
    evaluate("warm-up question", "warm-up answer", "warm-up context")  # load the embedding model once
    print(f"Embedding model loaded in {time.perf_counter() - started:.2f}s")

    with GroundlensCrewListener(name="eiffel-crew") as groundlens:
        agent = Agent(role="Researcher", goal="Answer questions about Paris landmarks from sources.",
                      backstory="A careful researcher who checks answers before giving them.",
                      llm=llm, tools=[lookup, groundlens.self_check_tool()], verbose=False)
        task = Task(description=QUESTION, expected_output="The height in metres.", agent=agent)
        started = time.perf_counter()
        result = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
        elapsed = time.perf_counter() - started
        trace = groundlens.get_trace()

    print("Self-check outputs the agent read:")
    for step in trace.steps:
        if step.metadata.get("self_check"):
            print(f"  answer={json.loads(step.question).get('answer')!r}")
            print("    " + str(step.response).replace("\n", "\n    "))
    print(f"\nFinal answer: {result.raw}")
    print(f"Crew run: {elapsed:.2f}s (scripted LLM; includes the self-checks)")
    print(f"\nTrace: {trace.summary(riskiest_first=True)}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace.save(out / "crewai_trace.json")
    print(f"Wrote {out / 'crewai_trace.json'}")
    try:
        from groundlens_core.trace.html import write_html
    except ImportError:
        return 0
    try:
        print(f"Wrote {write_html(trace, out / 'crewai_trace.html')}")
    except Exception as exc:  # the HTML report is a bonus here; the JSON is the deliverable
        print(f"(HTML report skipped: {exc})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
