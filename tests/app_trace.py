"""A small RAG graph run inside an application's own span, shared by the in-process OpenTelemetry
tests (test_app_span.py) and the Phoenix end-to-end test.

The graph is real LangGraph and the chat model a real LangChain chat model whose answers are
scripted (TableChatModel): what runs is the callbacks and the instrumentation, not a model.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from langchain_core.messages import HumanMessage, SystemMessage
from scripted_graphs import QAState, TableChatModel, linear_graph

QUESTION = "How tall is the Eiffel Tower in metres?"
PASSAGE = "The Eiffel Tower in Paris is 330 metres tall, antennas included, and was completed in 1889."
ANSWER = "The Eiffel Tower is 330 metres tall."
APP_SPAN = "POST /chat"


def rag_graph() -> Any:
    """``retrieve`` puts the passage in the state's ``context``; ``answer`` asks the model with it."""
    model = TableChatModel(table={QUESTION: ANSWER})

    def retrieve(state: QAState) -> dict:
        return {"context": PASSAGE}

    def answer(state: QAState) -> dict:
        reply = model.invoke([SystemMessage(f"Answer from this context only:\n{state['context']}"),
                              HumanMessage(state["question"])])
        return {"answer": reply.content}

    return linear_graph(QAState, retrieve=retrieve, answer=answer)


def run_in_app_span(tracer: Any, callback: Any, graph: Any = None) -> Any:
    """Invoke the graph with ``callback`` inside the application span ``POST /chat``; returns that span."""
    graph = graph if graph is not None else rag_graph()
    with tracer.start_as_current_span(APP_SPAN) as span:
        out = graph.invoke({"question": QUESTION}, config={"callbacks": [callback]})
    assert out["answer"] == ANSWER
    return span


@contextlib.contextmanager
def openinference_langchain(tracer_provider: Any) -> Iterator[Any]:
    """OpenInference's LangChain instrumentor, instrumenting for the block (it patches LangChain's
    callback manager process-wide, so it is always undone)."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        yield instrumentor
    finally:
        instrumentor.uninstrument()
