"""Score an AutoGen AgentChat team: live through wrapped model clients, with a termination condition
that stops the team on a flagged answer, and after the run with a checker. Runs offline.

ReplayChatCompletionClient scripts stand in for real model clients (OpenAIChatCompletionClient...):
a researcher calls a Python tool and answers, a writer summarises.

    pip install "groundlens-core[autogen]"
    python examples/autogen_team.py

AutoGen does not tell a model client which agent calls it: wrap one client per agent and name it.
The scores are triage signals that rank answers for human review, not verdicts of truth.
"""

from __future__ import annotations

import asyncio
import logging

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

from groundlens_core.plugins.autogen import (
    GroundlensChatCompletionClient,
    GroundlensChecker,
    GroundlensFlaggedTermination,
    groundlens_trace,
)
from groundlens_core.trace import Recorder, Trace

TASK = "What is the population of Paris?"
INFO = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                 structured_output=False)


def city_facts(city: str) -> str:
    """Facts about a city."""
    return "Paris is the capital of France and has about 2.1 million inhabitants."


def scripted(*responses) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(list(responses), model_info=INFO)


def lookup_call() -> CreateResult:
    return CreateResult(finish_reason="function_calls", usage=RequestUsage(20, 8), cached=False,
                        content=[FunctionCall(id="call-1", name="city_facts", arguments='{"city": "Paris"}')])


def build_team(answer: str, recorder: Recorder, stop: GroundlensFlaggedTermination) -> RoundRobinGroupChat:
    researcher = AssistantAgent(
        "researcher", tools=[city_facts], reflect_on_tool_use=True,
        model_client=GroundlensChatCompletionClient(scripted(lookup_call(), answer), agent_name="researcher",
                                                    recorder=recorder))
    writer = AssistantAgent(
        "writer", model_client=GroundlensChatCompletionClient(
            scripted("In short: Paris, the French capital, has about 2.1 million inhabitants."),
            agent_name="writer", recorder=recorder))
    return RoundRobinGroupChat([researcher, writer], termination_condition=MaxMessageTermination(3) | stop)


def show(title: str, trace: Trace) -> None:
    print(f"   {title}: {trace.summary()}")
    for step in trace.steps:
        sources = ", ".join(c.source for c in step.context) or "-"
        print(f"     #{step.index} {step.node:<11} {step.kind:<9} {step.label:<22} context: {sources}")


async def main() -> None:
    recorder = Recorder("autogen")  # shared by every wrapped client
    answers = {
        "grounded": "Paris has about 2.1 million inhabitants and is the capital of France.",
        "ungrounded": "Paris population statistics: the number of residents living in Paris.",
    }
    for label, answer in answers.items():
        print(f"\n== {label} run")
        stop = GroundlensFlaggedTermination()
        checker = GroundlensChecker()
        the_team = build_team(answer, recorder, stop)
        with groundlens_trace(recorder, f"{label} run") as key:
            checked = checker.check_stream(the_team.run_stream(task=TASK))
            async for _item in checked:  # every message passes through unchanged (e.g. into Console)
                pass
        print(f"   stop reason: {checked.task_result.stop_reason}")
        show("live, from the model clients", recorder.get_trace(key))
        show("after the run, from the messages", checked.trace)


if __name__ == "__main__":
    logging.getLogger("autogen_core.events").setLevel(logging.ERROR)  # the replay client's notes on tool_choice
    asyncio.run(main())
