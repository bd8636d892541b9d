"""The LangGraph callback on real graphs: StateGraph + ToolNode, create_agent, Send fan-outs,
subgraphs, sync/async/stream, concurrency, failures. Fake chat models, the real MiniLM embedder."""

from __future__ import annotations

import asyncio
import operator
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Callable, TypedDict

import pytest
import scripted_graphs
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from missing_extras import run_without
from scripted_graphs import DocsState, linear_graph

from groundlens_core.plugins.langchain import prompt as _langchain_prompt
from groundlens_core.plugins.langchain import runs as _langchain_runs
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback

SYSTEM = "You are a careful assistant. Always answer in one sentence."

DOCS = [
    Document(page_content="The Eiffel Tower is 330 metres tall and stands on the Champ de Mars in Paris.",
             metadata={"id": "eiffel"}),
    Document(page_content="The Great Wall of China is more than 21,000 kilometres long.", metadata={"id": "wall"}),
    Document(page_content="Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen.",
             metadata={"id": "photo"}),
]


# ---------------------------------------------------------------- fakes


class ScriptedModel(GenericFakeChatModel):
    """A fake chat model whose answer is a function of its input messages (so parallel branches
    get their own answers), optionally slow; ``bind_tools`` is a no-op so agents can use it."""

    respond: Any = None
    delay: float = 0.0
    meet: Any = None  # a threading.Barrier every call waits at: calls that provably run at the same time
    messages: Any = iter(())

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        if self.meet is not None:
            self.meet.wait()
        out = self.respond(messages) if self.respond is not None else next(self.messages)
        msg = AIMessage(content=out) if isinstance(out, str) else out
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools, **kwargs):
        return self


def scripted(*replies: AIMessage | str, respond: Callable | None = None, delay: float = 0.0,
             meet: threading.Barrier | None = None) -> ScriptedModel:
    return ScriptedModel(messages=iter(list(replies)), respond=respond, delay=delay, meet=meet)


class KeywordRetriever(BaseRetriever):
    """Documents sharing at least one content word with the query."""

    docs: list[Document]
    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = {w.strip("?.,").lower() for w in query.split() if len(w) > 3}
        scored = [(len(words & {w.strip("?.,").lower() for w in d.page_content.split()}), i, d) for i, d in enumerate(self.docs)]
        return [d for n, _, d in sorted(scored, key=lambda t: (-t[0], t[1])) if n > 0][: self.k]


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"In {city} it is sunny and 24 degrees Celsius with a light breeze."


def last_human(messages: list[BaseMessage]) -> str:
    return next(m.content for m in reversed(messages) if m.type == "human")


@pytest.fixture(scope="session")
def cal(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


def llm_steps(trace):
    return [s for s in trace.steps if s.kind == "llm"]


# ---------------------------------------------------------------- graphs


def tool_agent_graph(model):
    return scripted_graphs.tool_agent_graph(model, [get_weather], SYSTEM)


def rag_graph(model, retriever):
    def retrieve(state: DocsState):
        return {"documents": retriever.invoke(state["question"])}

    def answer(state: DocsState):
        msg = model.invoke([SystemMessage(SYSTEM + "\nContext:\n" + "\n".join(d.page_content for d in state["documents"])),
                            HumanMessage(state["question"])])
        return {"answer": msg.content}

    return linear_graph(DocsState, retrieve=retrieve, answer=answer)


class QAState(TypedDict, total=False):
    question: str
    context: str
    answer: str


def qa_graph(model):
    def answer(state: QAState):
        return {"answer": model.invoke([SystemMessage(SYSTEM), HumanMessage(state["question"])]).content}

    g = StateGraph(QAState)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    g.add_edge("answer", END)
    return g.compile()


# ---------------------------------------------------------------- tests


def test_stategraph_with_toolnode_records_tool_turn_tool_and_grounded_answer():
    model = scripted(
        AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call-1"}]),
        AIMessage(content="In Paris it is sunny and 24 degrees with a light breeze.",
                  usage_metadata={"input_tokens": 40, "output_tokens": 12, "total_tokens": 52},
                  response_metadata={"model_name": "scripted-1"}),
    )
    cb = GroundlensLangGraphCallback()
    out = tool_agent_graph(model).invoke({"messages": [HumanMessage("What is the weather in Paris today?")]},
                                         config={"callbacks": [cb]})
    assert out["messages"][-1].content.startswith("In Paris")
    trace = cb.get_trace()
    assert trace.framework == "langgraph" and trace.status == "ok" and trace.ended_at
    assert [(s.node, s.kind, s.method) for s in trace.steps] == [
        ("agent", "tool_call", "skipped"), ("tools", "tool", "skipped"), ("agent", "llm", "sgi")]
    turn, tool_step, answer = trace.steps
    assert turn.metadata["tool_calls"][0]["name"] == "get_weather"
    assert tool_step.metadata["tool"] == "get_weather" and "sunny" in tool_step.response
    assert tool_step.parent_id == turn.id  # the tool result hangs under the turn that asked for it
    assert answer.question == "What is the weather in Paris today?"  # the human message, not the system prompt
    assert SYSTEM not in answer.question
    assert [c.source for c in answer.context] == ["tool:get_weather"]
    assert [c.producer for c in answer.context] == [tool_step.id]  # its ToolMessage, by the tool call's id
    assert answer.model == "scripted-1"
    assert answer.provider  # from the model's ls_provider metadata
    assert answer.usage.input_tokens == 40 and answer.usage.total_tokens == 52
    assert answer.llm_latency_ms is not None and answer.llm_latency_ms >= 0
    assert answer.triage in ("trusted", "review", "flagged") and answer.result.fingerprint == trace.fingerprint


def test_rag_graph_grounded_answer_outscores_ungrounded_one_trace_per_invocation():
    retriever = KeywordRetriever(docs=DOCS)
    grounded = "The Eiffel Tower is 330 metres tall and stands on the Champ de Mars in Paris."
    ungrounded = "My favourite pasta recipe uses garlic, basil and plenty of parmesan cheese."
    model = scripted(grounded, ungrounded)
    graph = rag_graph(model, retriever)
    cb = GroundlensLangGraphCallback(name="rag")
    graph.invoke({"question": "How tall is the Eiffel Tower?"}, config={"callbacks": [cb]})
    graph.invoke({"question": "How tall is the Eiffel Tower?"}, config={"callbacks": [cb]})
    traces = cb.get_traces()
    assert len(traces) == 2 and all(t.name == "rag" for t in traces)
    assert cb.get_trace().id == traces[-1].id  # the latest run
    for t in traces:
        assert [(s.node, s.kind, s.method) for s in t.steps][:1] == [("retrieve", "retrieval", "skipped")]
        assert t.steps[0].question == "How tall is the Eiffel Tower?"
        assert any("Eiffel" in c.text for c in t.steps[0].context)
    good, bad = llm_steps(traces[0])[0], llm_steps(traces[1])[0]
    for step in (good, bad):
        assert step.node == "answer" and step.method == "sgi"
        assert step.question == "How tall is the Eiffel Tower?"
        assert "retriever" in {c.source for c in step.context}
        assert any("330 metres" in c.text for c in step.context)
    for t in traces:  # each call's documents name the retrieval step of its own run
        retrieval = t.steps[0]
        assert {c.producer for c in llm_steps(t)[0].context if c.source == "retriever"} == {retrieval.id}
    assert good.value > bad.value
    assert good.normalized > bad.normalized
    assert cb.get_trace(traces[1].metadata["root_run_id"]).id == traces[1].id


def test_no_context_gives_dgi_and_state_context_gives_sgi(cal):
    model = scripted(respond=lambda msgs: "Water boils at 100 degrees Celsius at sea level.")
    graph = qa_graph(model)
    cb = GroundlensLangGraphCallback(calibration=cal)
    graph.invoke({"question": "At what temperature does water boil?"}, config={"callbacks": [cb]})
    graph.invoke({"question": "At what temperature does water boil?",
                  "context": "At sea level, pure water boils at 100 degrees Celsius."}, config={"callbacks": [cb]})
    no_ctx, with_ctx = (llm_steps(t)[0] for t in cb.get_traces())
    assert no_ctx.method == "dgi" and no_ctx.context == ()
    assert with_ctx.method == "sgi"
    assert [c.source for c in with_ctx.context] == ["state:context"]


def test_metadata_overrides_question_and_adds_context():
    model = scripted(respond=lambda msgs: "Photosynthesis turns sunlight, water and CO2 into glucose and oxygen.")
    cb = GroundlensLangGraphCallback()
    qa_graph(model).invoke(
        {"question": "Explain, briefly please, this thing."},
        config={"callbacks": [cb], "metadata": {"groundlens_question": "What does photosynthesis produce?",
                                                "groundlens_context": [DOCS[2].page_content]}},
    )
    step = llm_steps(cb.get_trace())[0]
    assert step.question == "What does photosynthesis produce?"
    assert [(c.source, c.text) for c in step.context] == [("override", DOCS[2].page_content)]
    assert step.method == "sgi"


def test_custom_context_keys():
    class S(TypedDict, total=False):
        question: str
        evidence: str
        answer: str

    model = scripted(respond=lambda msgs: "It is 330 metres tall.")

    def answer(state: S):
        return {"answer": model.invoke([HumanMessage(state["question"])]).content}

    g = StateGraph(S)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    graph = g.compile()
    cb = GroundlensLangGraphCallback(context_keys=("evidence",))
    graph.invoke({"question": "How tall is the Eiffel Tower?", "evidence": DOCS[0].page_content}, config={"callbacks": [cb]})
    assert [c.source for c in llm_steps(cb.get_trace())[0].context] == ["state:evidence"]


POLICY = ("Unopened items can be returned within 30 days for a full refund. Opened electronics can be returned "
          "within 14 days and are subject to a 15% restocking fee. Refunds are issued to the original payment method "
          "within 5 business days. Express delivery costs 12 euros.")
RETURN_Q = "Can I return my opened laptop?"
RETURN_A = "Opened electronics can be returned within 14 days with a 15% restocking fee."


class PolicyState(TypedDict, total=False):
    question: str
    policy: str
    answer: str


def policy_graph(model, prompt: Callable[[PolicyState], list[BaseMessage]], nodes: tuple[str, ...] = ("answer",)):
    """A support graph whose retrieved policy sits under a state key the callback does not know
    (``policy``); ``prompt`` builds each node's model input from the state."""
    def node(state: PolicyState):
        return {"answer": model.invoke(prompt(state)).content}

    g = StateGraph(PolicyState)
    prev = START
    for name in nodes:
        g.add_node(name, node)
        g.add_edge(prev, name)
        prev = name
    g.add_edge(prev, END)
    return g.compile()


def test_policy_in_a_system_message_is_the_context_and_a_persona_prompt_stays_dgi(cal, caplog):
    def prompt(state: PolicyState) -> list[BaseMessage]:
        system = ("You are a support agent. Answer from this policy:\n" + state["policy"]) if state.get("policy") else SYSTEM
        return [SystemMessage(system), HumanMessage(state["question"])]

    graph = policy_graph(scripted(respond=lambda msgs: RETURN_A), prompt)
    cb = GroundlensLangGraphCallback(calibration=cal)
    with caplog.at_level("WARNING", logger="groundlens.langgraph"):
        graph.invoke({"question": RETURN_Q, "policy": POLICY}, config={"callbacks": [cb]})
        graph.invoke({"question": RETURN_Q}, config={"callbacks": [cb]})
    grounded, persona = (llm_steps(t)[0] for t in cb.get_traces())
    assert grounded.method == "sgi" and grounded.question == RETURN_Q
    assert [(c.source, c.text) for c in grounded.context] == [
        ("prompt:system", "You are a support agent. Answer from this policy:\n" + POLICY)]
    assert persona.method == "dgi" and persona.context == ()  # "You are a careful assistant..." is no context
    assert persona.question == RETURN_Q
    assert not [r for r in caplog.records if "without context" in r.getMessage()]  # a short prompt: no warning


@pytest.mark.parametrize("template", [
    "Answer using this context:\n{context}\n\nQuestion: {question}",
    "Context: {context} Question: {question}",
    "{context}\n\n{question}",  # a retrieved policy pasted above the question
    "<context>\n{context}\n</context>\n\n<question>{question}</question>\nAnswer in one sentence.",
])
def test_rag_template_in_the_human_message_splits_question_from_context(template):
    graph = policy_graph(scripted(respond=lambda msgs: RETURN_A),
                         lambda s: [SystemMessage(SYSTEM), HumanMessage(template.format(context=s["policy"], question=s["question"]))])
    cb = GroundlensLangGraphCallback()
    graph.invoke({"question": RETURN_Q, "policy": POLICY}, config={"callbacks": [cb]})
    step = llm_steps(cb.get_trace())[0]
    assert step.question == RETURN_Q  # the question alone, not the template around it
    assert [(c.source, c.text) for c in step.context] == [("prompt:human", POLICY)]
    assert step.method == "sgi"


def test_the_prompt_is_read_on_the_worker_never_on_the_agents_thread(monkeypatch):
    """Splitting a prompt into question and context is the callback's costliest part: the agent's
    thread only keeps the messages; the worker reads them, and the step still has both."""
    readers: list[threading.Thread] = []
    real = _langchain_prompt.read_messages

    def spy(messages):
        readers.append(threading.current_thread())
        return real(messages)

    monkeypatch.setattr(_langchain_prompt, "read_messages", spy)
    graph = policy_graph(scripted(respond=lambda msgs: RETURN_A),
                         lambda s: [SystemMessage(SYSTEM), HumanMessage(f"Context: {s['policy']} Question: {s['question']}")])
    cb = GroundlensLangGraphCallback()
    graph.invoke({"question": RETURN_Q, "policy": POLICY}, config={"callbacks": [cb]})
    assert threading.current_thread() not in readers  # the invocation returned without reading the prompt
    step = llm_steps(cb.get_trace())[0]
    assert readers and threading.current_thread() not in readers
    assert step.question == RETURN_Q and [(c.source, c.text) for c in step.context] == [("prompt:human", POLICY)]
    assert step.method == "sgi"


def test_state_context_is_read_on_the_worker_too(monkeypatch):
    """The state keys a node receives are kept as values at its start; turning them into context
    pieces happens on the worker, and the step's context is the state's."""
    readers: list[threading.Thread] = []
    real = _langchain_runs.context_from

    def spy(*groups, **kwargs):
        readers.append(threading.current_thread())
        return real(*groups, **kwargs)

    monkeypatch.setattr(_langchain_runs, "context_from", spy)
    graph = policy_graph(scripted(respond=lambda msgs: RETURN_A), lambda s: [HumanMessage(s["question"])])
    cb = GroundlensLangGraphCallback(context_keys=("policy",))
    graph.invoke({"question": RETURN_Q, "policy": POLICY}, config={"callbacks": [cb]})
    assert threading.current_thread() not in readers
    step = llm_steps(cb.get_trace())[0]
    assert readers and threading.current_thread() not in readers
    assert [(c.source, c.text) for c in step.context] == [("state:policy", POLICY)] and step.method == "sgi"


def test_retriever_context_keeps_priority_over_prompt_context():
    retriever = KeywordRetriever(docs=DOCS)

    class S(TypedDict, total=False):
        question: str
        documents: list[Document]
        answer: str

    model = scripted(respond=lambda msgs: "The Eiffel Tower is 330 metres tall.")

    def retrieve(state: S):
        return {"documents": retriever.invoke(state["question"])}

    def answer(state: S):
        return {"answer": model.invoke([SystemMessage("Answer from this policy:\n" + POLICY),
                                        HumanMessage(state["question"])]).content}

    g = StateGraph(S)
    g.add_node("retrieve", retrieve)
    g.add_node("answer", answer)
    g.add_edge(START, "retrieve")
    g.add_edge("retrieve", "answer")
    graph = g.compile()
    cb = GroundlensLangGraphCallback()
    graph.invoke({"question": "How tall is the Eiffel Tower?"}, config={"callbacks": [cb]})
    graph.invoke({"question": "Who painted it?"}, config={"callbacks": [cb]})  # the retriever finds nothing
    found, empty = (llm_steps(t)[0] for t in cb.get_traces())
    assert {c.source for c in found.context} == {"retriever"}  # the system prompt is not added
    assert not any(POLICY in c.text for c in found.context)
    assert [c.source for c in empty.context] == ["prompt:system"] and empty.method == "sgi"


def test_long_prompt_scored_without_context_warns_once_per_node(caplog):
    """The policy pasted without any marker the callback reads: DGI, and one warning per node
    (two invocations, two nodes: two warnings) naming the state key and ``context_keys``."""
    def prompt(state: PolicyState) -> list[BaseMessage]:
        return [HumanMessage(state["policy"] + "\n\nCustomer: my laptop is opened and I want to send it back.")]

    model = scripted(respond=lambda msgs: RETURN_A)
    cb = GroundlensLangGraphCallback()
    with caplog.at_level("WARNING", logger="groundlens.langgraph"):
        for _ in range(2):
            policy_graph(model, prompt, nodes=("answer", "check")).invoke(
                {"question": RETURN_Q, "policy": POLICY}, config={"callbacks": [cb]})
    steps = [s for t in cb.get_traces() for s in llm_steps(t)]
    assert len(steps) == 4 and all(s.method == "dgi" for s in steps)
    warnings = [r.getMessage() for r in caplog.records if "without context" in r.getMessage()]
    assert len(warnings) == 2
    assert {"'answer'" in w for w in warnings} == {True, False}  # one for each node
    for w in warnings:
        assert "context_keys=('context', 'documents', 'docs', 'policy')" in w and "groundlens_context" in w

    named = GroundlensLangGraphCallback(context_keys=("policy",))  # what the warning says to do
    caplog.clear()
    with caplog.at_level("WARNING", logger="groundlens.langgraph"):
        policy_graph(model, prompt).invoke({"question": RETURN_Q, "policy": POLICY}, config={"callbacks": [named]})
    step = llm_steps(named.get_trace())[0]
    assert step.method == "sgi" and [c.source for c in step.context] == ["state:policy"]
    assert not [r for r in caplog.records if "without context" in r.getMessage()]


class FanState(TypedDict, total=False):
    topics: list[str]
    answers: Annotated[list[str], operator.add]


class BranchState(TypedDict):
    topic: str
    context: str


ANSWERS = {
    "eiffel": ("How tall is the Eiffel Tower?", DOCS[0].page_content, "The Eiffel Tower is 330 metres tall."),
    "wall": ("How long is the Great Wall of China?", DOCS[1].page_content, "The Great Wall is over 21,000 km long."),
    "photo": ("What does photosynthesis produce?", DOCS[2].page_content, "It produces glucose and oxygen."),
}


def fanout_graph(model):
    def fan(state: FanState):
        return [Send("write", {"topic": t, "context": ANSWERS[t][1]}) for t in state["topics"]]

    def write(state: BranchState):
        q = ANSWERS[state["topic"]][0]
        return {"answers": [model.invoke([SystemMessage("Context: " + state["context"]), HumanMessage(q)]).content]}

    g = StateGraph(FanState)
    g.add_node("write", write)
    g.add_conditional_edges(START, fan, ["write"])
    g.add_edge("write", END)
    return g.compile()


def _answer_for(msgs):
    q = last_human(msgs)
    return next(a for (qq, _, a) in ANSWERS.values() if qq == q)


def _check_fanout(trace):
    steps = llm_steps(trace)
    assert len(steps) == 3 and {s.node for s in steps} == {"write"}
    for s in steps:
        topic = next(t for t, (q, _, _) in ANSWERS.items() if q == s.question)
        q, ctx, a = ANSWERS[topic]
        assert s.response == a
        assert [(c.source, c.text) for c in s.context] == [("state:context", ctx)]  # its own branch only
        assert s.method == "sgi"
    spans = sorted((s.started_at, s.ended_at) for s in steps)
    assert any(b_start < a_end for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # the branches really overlapped


def _all_branches_at_once() -> threading.Barrier:
    """The three branches wait for each other inside the model call, so they overlap however the
    machine schedules them (a 50 ms sleep did not, when a loaded machine started a branch late);
    a framework that ran them one after another would break the barrier (BrokenBarrierError)."""
    return threading.Barrier(len(ANSWERS), timeout=120)


def test_send_fanout_branches_keep_their_own_question_and_context_threads():
    model = scripted(respond=_answer_for, meet=_all_branches_at_once())
    cb = GroundlensLangGraphCallback()
    out = fanout_graph(model).invoke({"topics": list(ANSWERS)}, config={"callbacks": [cb]})
    assert len(out["answers"]) == 3
    _check_fanout(cb.get_trace())


async def test_send_fanout_branches_keep_their_own_context_async():
    model = scripted(respond=_answer_for, meet=_all_branches_at_once())
    cb = GroundlensLangGraphCallback()
    await fanout_graph(model).ainvoke({"topics": list(ANSWERS)}, config={"callbacks": [cb]})
    _check_fanout(cb.get_trace())


def research_subgraph(write: Callable[[DocsState], dict]):
    """A compiled subgraph: retrieve (a keyword retriever over DOCS), then ``write``."""
    retriever = KeywordRetriever(docs=DOCS)
    sg = StateGraph(DocsState)
    sg.add_node("retrieve", lambda state: {"documents": retriever.invoke(state["question"])})
    sg.add_node("write", write)
    sg.add_edge(START, "retrieve")
    sg.add_edge("retrieve", "write")
    return sg.compile()


def test_subgraph_node_path_and_retriever_context_inside_it():
    model = scripted(respond=lambda msgs: "The Great Wall of China is more than 21,000 kilometres long.")
    research = research_subgraph(lambda state: {"answer": model.invoke([HumanMessage(state["question"])]).content})

    g = StateGraph(DocsState)
    g.add_node("research", research)
    g.add_edge(START, "research")
    g.add_edge("research", END)
    cb = GroundlensLangGraphCallback()
    g.compile().invoke({"question": "How long is the Great Wall of China?"}, config={"callbacks": [cb]})
    trace = cb.get_trace()
    assert [(s.node, s.kind) for s in trace.steps] == [("research/retrieve", "retrieval"), ("research/write", "llm")]
    step = trace.steps[1]
    assert step.method == "sgi" and step.question == "How long is the Great Wall of China?"
    assert {c.source for c in step.context} == {"retriever"}  # state:documents holds the same texts
    assert any("21,000" in c.text for c in step.context)


class NodeRuns(BaseCallbackHandler):
    """A plain LangChain handler beside ours: the run id of every graph node, by checkpoint namespace."""

    def __init__(self):
        self.by_ns: dict[str, str] = {}

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, metadata=None, **kwargs):
        ns = (metadata or {}).get("langgraph_checkpoint_ns")
        if ns:
            self.by_ns.setdefault(ns, str(run_id))  # the first run of a namespace is the node's own run


def test_steps_in_a_subgraph_hang_under_their_node_run():
    model = scripted(
        AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call-7"}]),
        "The Great Wall of China is more than 21,000 kilometres long.",
        "In Paris it is sunny.",
    )

    def write(state: DocsState):
        model.invoke([HumanMessage("Weather in Paris?")])  # a tool-call turn
        return {"answer": model.invoke([HumanMessage(state["question"])]).content}

    def summary(state: DocsState):
        return {"answer": model.invoke([HumanMessage("Summarise: " + state["answer"])]).content}

    g = StateGraph(DocsState)
    g.add_node("research", research_subgraph(write))
    g.add_node("summary", summary)
    g.add_edge(START, "research")
    g.add_edge("research", "summary")
    g.add_edge("summary", END)
    cb, nodes = GroundlensLangGraphCallback(), NodeRuns()
    g.compile().invoke({"question": "How long is the Great Wall of China?"}, config={"callbacks": [cb, nodes]})
    trace = cb.get_trace()
    by_node = {}
    for s in trace.steps:
        by_node.setdefault(s.node, []).append(s)
    node_run = {ns.split(":")[0] if "|" not in ns else "/".join(p.split(":")[0] for p in ns.split("|")): rid
                for ns, rid in nodes.by_ns.items()}
    assert set(node_run) >= {"research", "research/retrieve", "research/write", "summary"}
    retrieval, = by_node["research/retrieve"]
    turn, answer = by_node["research/write"]
    final, = by_node["summary"]
    assert (turn.kind, answer.kind, final.kind) == ("tool_call", "llm", "llm")
    # every step's parent is the run of the graph node (inside the subgraph: the subgraph's node) it ran in
    assert retrieval.parent_id == node_run["research/retrieve"]
    assert turn.parent_id == answer.parent_id == node_run["research/write"]
    assert final.parent_id == node_run["summary"]
    assert node_run["research/write"] != node_run["research"]
    assert trace.to_dict()["steps"][2]["parent_id"] == node_run["research/write"]


def test_graph_that_raises_keeps_the_steps_so_far():
    model = scripted(respond=lambda msgs: "Paris is the capital of France.")

    def answer(state: QAState):
        return {"answer": model.invoke([HumanMessage(state["question"])]).content}

    def publish(state: QAState):
        raise RuntimeError("publishing service is down")

    g = StateGraph(QAState)
    g.add_node("answer", answer)
    g.add_node("publish", publish)
    g.add_edge(START, "answer")
    g.add_edge("answer", "publish")
    cb = GroundlensLangGraphCallback()
    with pytest.raises(RuntimeError, match="publishing service"):
        g.compile().invoke({"question": "What is the capital of France?",
                            "context": "Paris is the capital and largest city of France."}, config={"callbacks": [cb]})
    trace = cb.get_trace()
    assert trace.status == "error" and "publishing service is down" in trace.error
    assert [(s.node, s.method) for s in trace.steps] == [("answer", "sgi")]


def test_llm_error_is_an_error_step():
    class Broken(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            raise ConnectionError("provider unreachable")

    cb = GroundlensLangGraphCallback()
    with pytest.raises(ConnectionError):
        qa_graph(Broken()).invoke({"question": "Anyone there?"}, config={"callbacks": [cb]})
    trace = cb.get_trace()
    assert trace.status == "error"
    [step] = trace.steps
    assert step.method == "error" and step.triage == "error" and "provider unreachable" in step.error
    assert step.question == "Anyone there?" and step.node == "answer"


def test_internal_failure_never_reaches_the_graph(internal_errors_logged, monkeypatch, caplog, cal):
    def boom(*args, **kwargs):
        raise ValueError("simulated groundlens bug")

    monkeypatch.setattr(_langchain_prompt, "tool_message_pieces", boom)  # read on the worker
    model = scripted(AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "c9"}]),
                     "In Oslo it is sunny and 24 degrees.")
    cb = GroundlensLangGraphCallback(calibration=cal)
    with caplog.at_level("WARNING", logger="groundlens.langgraph"):
        out = tool_agent_graph(model).invoke({"messages": [HumanMessage("Weather in Oslo?")]}, config={"callbacks": [cb]})
    assert out["messages"][-1].content == "In Oslo it is sunny and 24 degrees."  # the graph's result is intact
    assert len(out["messages"]) == 4
    trace = cb.get_trace()
    errors = [s for s in trace.steps if s.method == "error"]
    assert len(errors) == 2 and all(s.metadata.get("internal_error") for s in errors)
    assert all("simulated groundlens bug" in s.error and s.node == "agent" for s in errors)
    assert any(s.kind == "tool" for s in trace.steps)  # the rest is still recorded
    assert trace.status == "ok"
    assert any("simulated groundlens bug" in r.getMessage() for r in caplog.records)


def test_stream_and_with_config_one_trace_per_invocation():
    model = scripted(respond=lambda msgs: f"Answer to: {last_human(msgs)}")
    cb = GroundlensLangGraphCallback()
    graph = qa_graph(model).with_config(callbacks=[cb])
    chunks = list(graph.stream({"question": "What is the first question?"}))
    assert chunks and "answer" in chunks[-1]
    graph.invoke({"question": "What is the second question?"})
    list(qa_graph(model).stream({"question": "What is the third question?"}, config={"callbacks": [cb]},
                                stream_mode="messages"))
    traces = cb.get_traces()
    assert [llm_steps(t)[0].question for t in traces] == [
        "What is the first question?", "What is the second question?", "What is the third question?"]
    assert all(t.ended_at and t.status == "ok" for t in traces)
    assert llm_steps(traces[2])[0].response == "Answer to: What is the third question?"


def test_stream_stopped_early_and_interrupt_are_not_errors():
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    model = scripted(respond=lambda msgs: "Paris is the capital of France.")
    cb = GroundlensLangGraphCallback()
    for _chunk in rag_graph(model, KeywordRetriever(docs=DOCS)).stream({"question": "How tall is the Eiffel Tower?"},
                                                                        config={"callbacks": [cb]}):
        break  # the consumer stops after the first chunk
    stopped = cb.get_trace()
    assert stopped.status == "ok" and stopped.metadata.get("stopped_early") and stopped.ended_at

    def answer(state: QAState):
        return {"answer": model.invoke([HumanMessage(state["question"])]).content}

    def approve(state: QAState):
        return {"answer": state["answer"] + (" (approved)" if interrupt("approve?") else "")}

    g = StateGraph(QAState)
    g.add_node("answer", answer)
    g.add_node("approve", approve)
    g.add_edge(START, "answer")
    g.add_edge("answer", "approve")
    app = g.compile(checkpointer=InMemorySaver())
    cfg = {"callbacks": [cb], "configurable": {"thread_id": "t-1"}}
    app.invoke({"question": "What is the capital of France?", "context": "Paris is the capital of France."}, config=cfg)
    paused = cb.get_trace()
    assert paused.status == "ok" and paused.metadata.get("interrupted") and paused.metadata.get("thread_id") == "t-1"
    assert [(s.node, s.method) for s in paused.steps] == [("answer", "sgi")]
    assert app.invoke(Command(resume=True), config=cfg)["answer"].endswith("(approved)")
    assert cb.get_trace().status == "ok" and len(cb.get_traces()) == 3


async def test_concurrent_async_invocations_and_astream_stay_separate(cal):
    model = scripted(respond=lambda msgs: f"Answer to: {last_human(msgs)}", delay=0.02)
    cb = GroundlensLangGraphCallback(calibration=cal)
    graph = qa_graph(model)
    questions = [f"What is question number {i}?" for i in range(4)]

    async def streamed(q):
        return [c async for c in graph.astream({"question": q}, config={"callbacks": [cb]})]

    await asyncio.gather(*(graph.ainvoke({"question": q}, config={"callbacks": [cb]}) for q in questions[:3]),
                         streamed(questions[3]))
    traces = cb.get_traces()
    assert len(traces) == 4
    for t in traces:
        [step] = t.steps
        assert step.response == f"Answer to: {step.question}"
        assert step.method == "dgi"
    assert sorted(llm_steps(t)[0].question for t in traces) == sorted(questions)


def test_concurrent_invocations_from_a_thread_pool():
    retriever = KeywordRetriever(docs=DOCS, k=1)
    model = scripted(respond=lambda msgs: f"Answer to: {last_human(msgs)}", delay=0.02)
    graph = rag_graph(model, retriever)
    cb = GroundlensLangGraphCallback()
    qs = [ANSWERS[t][0] for t in ANSWERS] * 2
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda q: graph.invoke({"question": q}, config={"callbacks": [cb]}), qs))
    traces = cb.get_traces()
    assert len(traces) == len(qs)
    for t in traces:
        retrieval, step = t.steps
        assert retrieval.question == step.question
        expected_doc = next(ctx for (q, ctx, _) in ANSWERS.values() if q == step.question)
        assert [c.text for c in step.context] == [expected_doc]  # its own retrieval, not a neighbour's


def test_create_agent_with_tools():
    from langchain.agents import create_agent

    model = scripted(
        AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Rome"}, "id": "call-7"}]),
        AIMessage(content="In Rome it is sunny and 24 degrees Celsius."),
    )
    agent = create_agent(model=model, tools=[get_weather], system_prompt=SYSTEM)
    cb = GroundlensLangGraphCallback()
    agent.invoke({"messages": [{"role": "user", "content": "How is the weather in Rome?"}]}, config={"callbacks": [cb]})
    trace = cb.get_trace()
    assert [(s.node, s.kind, s.method) for s in trace.steps] == [
        ("model", "tool_call", "skipped"), ("tools", "tool", "skipped"), ("model", "llm", "sgi")]
    final = trace.steps[-1]
    assert final.question == "How is the weather in Rome?"
    assert [c.source for c in final.context] == ["tool:get_weather"]
    assert "1 trusted" in trace.summary() or "1 review" in trace.summary() or "1 flagged" in trace.summary()


def test_plugin_imports_without_langchain_and_says_what_to_install():
    out = run_without(("langchain_core",), """
        from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
        hint(GroundlensLangGraphCallback)
        from groundlens_core.plugins.langchain import GroundlensCallback, GroundlensEvaluator
        print('EVAL', GroundlensEvaluator()(inputs={}, outputs={})['score'])
        hint(GroundlensCallback)
    """)
    assert 'pip install "groundlens-core[langgraph]"' in out
    assert "EVAL None" in out  # the evaluator needs no LangChain
    assert 'pip install "groundlens-core[langchain]"' in out


def test_tracer_provider_exports_live_spans():
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    model = scripted(respond=lambda msgs: "Paris is the capital of France.")
    cb = GroundlensLangGraphCallback(tracer_provider=provider)
    qa_graph(model).invoke({"question": "What is the capital of France?", "context": "Paris is the capital of France."},
                           config={"callbacks": [cb]})
    trace = cb.get_trace()
    assert trace.steps[0].method == "sgi"
    finished = spans.get_finished_spans()
    assert len(finished) >= 2  # the root run and its LLM step
    assert len({s.context.trace_id for s in finished}) == 1


def test_the_warnings_state_hints_come_from_the_first_state_with_long_text_and_never_fail():
    from collections.abc import Mapping

    from groundlens_core.plugins.langchain.runs import hint_keys

    class Unreadable(Mapping):
        def __getitem__(self, key):
            raise KeyError(key)

        def __iter__(self):
            raise RuntimeError("changed while it was read")

        def __len__(self):
            return 1

    long = "x " * 200
    assert hint_keys(("context",), {"question": "q"}, {"policy": long, "context": long}) == ("policy",)
    assert hint_keys(("context",), {"notes": long}, {"policy": long}) == ("notes",)
    assert hint_keys(("context",), Unreadable(), {"policy": long}) == ()
