"""The LangChain callback's two halves: on the agent's thread each callback only keeps what could
change and queues the raw event; the translation into steps runs later, in order, on the worker or
where a trace is read. Real LangGraph graphs, scripted model and retriever, the real embedder."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage, SystemMessage
from scripted_graphs import DocsState, TableChatModel, TableRetriever, linear_graph

from groundlens_core import internal_errors
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
from groundlens_core.trace import recorder as recorder_mod
from groundlens_core.trace.model import META_OTEL_PARENT

QUESTION = "How tall is the Eiffel Tower?"
CONTEXT = "The Eiffel Tower is 330 metres tall and stands on the Champ de Mars in Paris."
ANSWER = "The Eiffel Tower is 330 metres tall."


def rag_graph(after=None):
    """retrieve -> answer (-> after, when given)."""
    retriever = TableRetriever(table={QUESTION: CONTEXT})
    model = TableChatModel(table={QUESTION: ANSWER})

    def retrieve(state: DocsState) -> dict:
        return {"documents": retriever.invoke(state["question"])}

    def answer(state: DocsState) -> dict:
        context = "\n\n".join(d.page_content for d in state["documents"])
        msg = model.invoke(
            [SystemMessage(f"Answer only from this context:\n{context}"), HumanMessage(state["question"])]
        )
        return {"answer": msg.content}

    steps = {"retrieve": retrieve, "answer": answer}
    if after is not None:
        steps["after"] = after
    return linear_graph(DocsState, **steps)


def unix(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def held(cb: GroundlensLangGraphCallback, monkeypatch) -> GroundlensLangGraphCallback:
    """``cb`` with its worker never woken by an event: its raw events wait until a trace is read."""
    monkeypatch.setattr(cb.recorder._worker, "idle", False)
    return cb


def test_the_agents_thread_only_queues_and_the_worker_translates(monkeypatch):
    cb = GroundlensLangGraphCallback(name="t")
    threads: list[str] = []
    record = cb.recorder.record
    monkeypatch.setattr(
        cb.recorder, "record", lambda call: (threads.append(threading.current_thread().name), record(call))[1]
    )
    rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})
    agent = threading.current_thread().name
    assert agent not in threads  # nothing was translated on the agent's thread
    deadline = time.monotonic() + 30
    while (cb.recorder.raw_pending() or not threads) and time.monotonic() < deadline:  # the worker drains by itself
        time.sleep(0.01)
    assert not cb.recorder.raw_pending()
    assert threads and set(threads) == {"groundlens-langgraph"}
    (trace,) = cb.get_traces()
    assert [s.kind for s in trace.steps] == ["retrieval", "llm"]
    assert trace.steps[1].context[0].text == CONTEXT


def test_a_call_record_reaches_the_recorder_once_with_its_prompt_read(monkeypatch):
    """The translation reads the prompt: the record the recorder gets carries the question and the
    context as data, and goes straight into the worker's batch (the one queue is never crossed
    twice: nothing the translation records waits at the queue's end)."""
    cb = GroundlensLangGraphCallback(name="t")
    seen: list[tuple] = []
    record = cb.recorder.record

    def spy(call, **kwargs):
        backlog = cb.recorder._backlog
        seen.append((call.kind, call.question, [p.text for p in call.context], backlog.sink is not None))
        return record(call, **kwargs)

    monkeypatch.setattr(cb.recorder, "record", spy)
    rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})
    (trace,) = cb.get_traces()
    llm = next(s for s in seen if s[0] == "llm")
    assert llm[1] == QUESTION and llm[2] == [CONTEXT]
    assert all(s[3] for s in seen)  # every record was made inside a translation, into its batch
    assert not cb.recorder._backlog.items and cb.recorder.idle()
    assert [s.kind for s in trace.steps] == ["retrieval", "llm"]


def test_a_prompt_that_cannot_be_read_is_an_error_step_and_raised_at_the_read(monkeypatch):
    """The prompt is read in the translation: a reading that fails never reaches the agent, is
    raised where the traces are read (the test suite's setting), and in a user's program leaves an
    error step with the response kept, never a lost call."""
    from groundlens_core.plugins.langchain import prompt as prompt_mod
    from groundlens_core.trace.model import META_INTERNAL_ERROR

    def broken(self):
        raise ZeroDivisionError("reading bug")

    monkeypatch.setattr(prompt_mod.PromptRead, "_read", broken)
    cb = GroundlensLangGraphCallback(name="t")
    assert rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})["answer"] == ANSWER
    with pytest.raises(internal_errors.InternalError, match="reading bug"):
        cb.get_traces()

    monkeypatch.setenv(internal_errors.ENV, "0")
    cb = GroundlensLangGraphCallback(name="t")
    rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})
    (trace,) = cb.get_traces()
    (llm,) = [s for s in trace.steps if s.kind == "llm"]
    assert llm.method == "error" and "reading bug" in llm.error and llm.metadata[META_INTERNAL_ERROR]
    assert llm.response == ANSWER


def test_times_and_the_app_span_are_the_callbacks_not_the_translations(monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("the-app")
    cb = held(GroundlensLangGraphCallback(name="t"), monkeypatch)
    before = time.time()
    with tracer.start_as_current_span("POST /chat") as span:
        rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})
    after = time.time()
    assert cb.recorder.raw_pending()
    time.sleep(0.3)  # the translation comes later (at the read below): its clock must not show
    (trace,) = cb.get_traces()
    assert not cb.recorder.raw_pending()
    span_id = format(span.get_span_context().span_id, "016x")
    assert trace.metadata[META_OTEL_PARENT]["span_id"] == span_id
    llm = trace.steps[1]
    assert llm.metadata[META_OTEL_PARENT]["span_id"] == span_id
    times = [unix(t) for t in (trace.started_at, llm.started_at, llm.ended_at, trace.ended_at)]
    assert before <= times[0] <= times[1] <= times[2] <= times[3] <= after, (before, times, after)


def test_what_a_later_node_changes_in_place_is_not_in_an_earlier_calls_context(monkeypatch):
    added = "The Eiffel Tower was painted red in 2020."

    def after(state: DocsState) -> dict:
        state["documents"].append(Document(page_content=added))  # in place, after the call was made
        state["documents"][0].page_content += " Changed later."
        return {}

    cb = held(GroundlensLangGraphCallback(name="t"), monkeypatch)
    rag_graph(after).invoke({"question": QUESTION}, config={"callbacks": [cb]})
    (trace,) = cb.get_traces()
    llm = next(s for s in trace.steps if s.kind == "llm")
    texts = [p.text for p in llm.context]
    assert texts and all(added not in t and "Changed later" not in t for t in texts), texts
    assert llm.context[0].text == CONTEXT


def test_the_queue_stays_bounded_when_the_worker_never_comes(monkeypatch):
    monkeypatch.setattr(recorder_mod, "MAX_RAW_EVENTS", 8)
    cb = held(GroundlensLangGraphCallback(name="t", max_traces=50), monkeypatch)
    graph = rag_graph()
    most = 0
    for _ in range(5):
        graph.invoke({"question": QUESTION}, config={"callbacks": [cb]})
        most = max(most, cb.recorder.raw_pending())
    assert 0 < most <= 8
    traces = cb.get_traces()
    assert len(traces) == 5 and all([s.kind for s in t.steps] == ["retrieval", "llm"] for t in traces)


def test_a_failing_translation_never_reaches_the_agent_and_is_raised_at_the_read(monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("translation bug")

    cb = held(GroundlensLangGraphCallback(name="t"), monkeypatch)
    monkeypatch.setattr(cb, "_generation_steps", broken)
    out = rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb]})
    assert out["answer"] == ANSWER  # the agent's run is untouched
    with pytest.raises(internal_errors.InternalError, match="translation bug"):
        cb.get_traces()

    monkeypatch.setenv(internal_errors.ENV, "0")  # a user's program: an error step in the run's own trace
    cb2 = held(GroundlensLangGraphCallback(name="t"), monkeypatch)
    monkeypatch.setattr(cb2, "_generation_steps", broken)
    rag_graph().invoke({"question": QUESTION}, config={"callbacks": [cb2]})
    (trace,) = cb2.get_traces()
    errors = [s for s in trace.steps if s.error]
    assert len(errors) == 1 and "translation bug" in errors[0].error and errors[0].node == "answer"
    assert errors[0].metadata["callback"] == "on_llm_end"  # named after the callback, at its time
    assert unix(trace.started_at) <= unix(errors[0].started_at) <= unix(trace.ended_at)


def test_a_root_llm_call_keeps_its_app_span_and_a_read_elsewhere_lends_it_none(monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("the-app")
    model = TableChatModel(table={QUESTION: ANSWER})
    cb = held(GroundlensLangGraphCallback(name="t"), monkeypatch)
    with tracer.start_as_current_span("POST /chat") as span:
        model.invoke([HumanMessage(QUESTION)], config={"callbacks": [cb]})  # the LLM run is the root
    model.invoke([HumanMessage(QUESTION)], config={"callbacks": [cb]})  # outside any span
    with tracer.start_as_current_span("GET /other-request"):
        inside, outside = cb.recorder.get_traces(wait=False)  # translated here, inside another request's span
    span_id = format(span.get_span_context().span_id, "016x")
    assert inside.metadata[META_OTEL_PARENT]["span_id"] == span_id
    assert inside.steps[0].metadata[META_OTEL_PARENT]["span_id"] == span_id
    assert META_OTEL_PARENT not in outside.metadata
    assert META_OTEL_PARENT not in outside.steps[0].metadata


def test_callbacks_sharing_a_recorder_are_let_go_once_their_events_are_translated():
    import gc
    import weakref

    shared = recorder_mod.Recorder("langgraph", worker_torch_threads=None)
    graph = rag_graph()
    refs = []
    for _ in range(5):
        cb = GroundlensLangGraphCallback(name="t", recorder=shared)
        graph.invoke({"question": QUESTION}, config={"callbacks": [cb]})
        refs.append(weakref.ref(cb))
        del cb
    assert len(shared.get_traces()) == 5  # nothing queued was lost with its callback
    gc.collect()
    assert all(ref() is None for ref in refs)
