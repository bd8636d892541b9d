"""LangGraph graphs with scripted parts, shared by the tests and the benchmarks.

The graph is real LangGraph; only the model (and the retriever) are scripted, so what a test or a
benchmark measures is the tracing, not a model.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence, TypedDict

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


class QAState(TypedDict, total=False):
    """A question-answering graph's state: the question, the context a retrieving node puts in, the answer."""

    question: str
    context: str
    answer: str


class DocsState(TypedDict, total=False):
    """A question-answering graph's state with the retrieved documents in place of a context string."""

    question: str
    documents: list[Document]
    answer: str


def linear_graph(state: type, **steps: Callable[[Any], dict]) -> Any:
    """The compiled graph ``START -> steps (in the order given) -> END`` over ``state``."""
    g = StateGraph(state)
    for name, fn in steps.items():
        g.add_node(name, fn)
    order = [START, *steps, END]
    for a, b in zip(order, order[1:]):
        g.add_edge(a, b)
    return g.compile()


def tool_agent_graph(model: Any, tools: Sequence[Any], system: str) -> Any:
    """The classic agent loop: ``agent`` (the model, after ``system``) calls ``tools`` until it answers."""

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke([SystemMessage(system)] + state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(list(tools)))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


class TableRetriever(BaseRetriever):
    """Returns the context stored for a question (a dict lookup: no search cost in the figures)."""

    table: dict[str, str]
    source: str | None = None  # the documents' ``source`` metadata, when set

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        metadata = {} if self.source is None else {"source": self.source}
        return [Document(page_content=self.table[query], metadata=metadata)]


class TableChatModel(GenericFakeChatModel):
    """Answers the last human message from a table, after sleeping ``delay`` seconds when set."""

    table: dict[str, str]
    delay: float = 0.0
    reported_model: str | None = None  # the response metadata's model_name, when set
    messages: Any = iter(())

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        question = next(m.content for m in reversed(messages) if m.type == "human")
        metadata = {} if self.reported_model is None else {"model_name": self.reported_model}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=self.table[question], response_metadata=metadata))])
