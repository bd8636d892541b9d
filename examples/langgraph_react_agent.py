"""A tool-calling (ReAct) agent built with LangGraph, traced with groundlens, offline.

    pip install "groundlens-core[langgraph]"
    python examples/langgraph_react_agent.py [--out out/]

The agent is the usual LangGraph loop: an ``agent`` node calls the chat model with its tools bound;
while the model asks for tools, ``ToolNode`` runs them and the loop goes back to the model. The
scripted model first asks for two tools (order status, shipping policy), then answers from what they
returned; the answer is scored with SGI against those tool outputs. A second question needs no tool:
the model answers from memory and the step gets a DGI score (no context). The tool-calling turn and
the tool results are recorded as skipped steps: they are context, not answers.

Scores are triage signals that rank which outputs a human should review first, not verdicts of truth.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback


class ToolCallingFakeModel(GenericFakeChatModel):
    """GenericFakeChatModel replays its scripted messages; an agent needs ``bind_tools``."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFakeModel:
        return self


@tool
def order_status(order_id: str) -> str:
    """Where an order is."""
    return f"Order {order_id} left the Rotterdam warehouse on 3 June and is with DHL, tracking number 00340434."


@tool
def shipping_policy(country: str) -> str:
    """Delivery times to a country."""
    return f"Standard delivery to {country} takes 2 to 4 working days after dispatch."


TOOLS = [order_status, shipping_policy]
SYSTEM_PROMPT = "You are a shop's delivery assistant. Use your tools."

SCRIPT = [
    AIMessage(content="", tool_calls=[
        {"name": "order_status", "args": {"order_id": "A-1042"}, "id": "call-1"},
        {"name": "shipping_policy", "args": {"country": "Germany"}, "id": "call-2"},
    ]),
    AIMessage(content="Your order A-1042 left the Rotterdam warehouse on 3 June with DHL (tracking 00340434); "
                      "delivery to Germany takes 2 to 4 working days after dispatch.",
              usage_metadata={"input_tokens": 212, "output_tokens": 41, "total_tokens": 253},
              response_metadata={"model_name": "scripted-agent-v1"}),
    AIMessage(content="Most parcels in Europe are delivered on weekdays between 8:00 and 18:00.",
              response_metadata={"model_name": "scripted-agent-v1"}),
]


def build_agent(model: Any) -> Any:
    """agent -> (tools -> agent)* -> end: the ReAct loop on langgraph and langchain-core only."""
    bound = model.bind_tools(TOOLS)

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke([SystemMessage(SYSTEM_PROMPT), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(TOOLS))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)  # to "tools" while the model asks for tools, else end
    graph.add_edge("tools", "agent")
    return graph.compile()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also save the traces as JSON in this folder")
    args = parser.parse_args(argv)

    agent = build_agent(ToolCallingFakeModel(messages=iter(SCRIPT)))
    cb = GroundlensLangGraphCallback(name="delivery-agent")

    for question in ("Where is my order A-1042 and when will it reach Germany?",
                     "At what time of day do parcels usually arrive?"):
        agent.invoke({"messages": [{"role": "user", "content": question}]}, config={"callbacks": [cb]})
        trace = cb.get_trace()
        print(f"Q: {question}")
        print(f"   {trace.summary()}")
        for step in trace.steps:
            sources = ", ".join(sorted({c.source for c in step.context})) or "-"
            print(f"   #{step.index} {step.node:6s} {step.kind:9s} {step.label:22s} context: {sources}")
            if step.error:
                print(f"      error: {step.error}")
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            trace.save(out / f"agent_trace_{len(cb.get_traces())}.json")
    print("\nScores are triage signals for ranking what to review first, not verdicts of truth.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
