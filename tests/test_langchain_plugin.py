"""The LangChain plugin: the evaluator (openevals / LangSmith / string-evaluator shapes) and the
callback on plain runnables and create_agent agents. Fake models, the real MiniLM embedder."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import tool

from groundlens_core.plugins.langchain import GroundlensCallback, GroundlensEvaluator

QUESTION = "How tall is the Eiffel Tower?"
CONTEXT = "The Eiffel Tower is 330 metres tall and stands on the Champ de Mars in Paris."
GROUNDED = "The Eiffel Tower is 330 metres tall."
UNGROUNDED = "My favourite pasta recipe uses garlic, basil and plenty of parmesan cheese."


class ScriptedModel(GenericFakeChatModel):
    """Fake chat model: answers with ``respond(messages)`` or the next scripted message; can return
    several generations per call; ``bind_tools`` is a no-op so create_agent can use it."""

    respond: Any = None
    n: int = 1
    messages: Any = iter(())

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        gens = []
        for _ in range(self.n):
            out = self.respond(messages) if self.respond is not None else next(self.messages)
            gens.append(ChatGeneration(message=AIMessage(content=out) if isinstance(out, str) else out))
        return ChatResult(generations=gens)

    def bind_tools(self, tools, **kwargs):
        return self


class StaticRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return list(self.docs)


@pytest.fixture(scope="session")
def cal(dgi_calibration):
    """The shared small DGI direction (conftest.py): tests don't depend on the bundled one."""
    return dgi_calibration


# ---------------------------------------------------------------- evaluator


def test_evaluator_openevals_shape_and_grounded_beats_ungrounded():
    ev = GroundlensEvaluator()
    good = ev(inputs={"question": QUESTION}, outputs={"answer": GROUNDED}, reference_outputs={"context": CONTEXT})
    bad = ev(inputs={"question": QUESTION}, outputs={"answer": UNGROUNDED}, reference_outputs={"context": CONTEXT})
    for res in (good, bad):
        assert set(res) == {"key", "score", "comment", "metadata"} and res["key"] == "groundlens"
        assert res["metadata"]["method"] == "sgi" and res["metadata"]["context_from"] == "reference_outputs.context"
        assert 0.0 <= res["score"] <= 1.0 and res["score"] == res["metadata"]["score"]  # the ranked value
        assert res["metadata"]["normalized"] != res["score"]  # tanh(SGI) keeps its own name
        assert res["metadata"]["triage"] in ("trusted", "review", "flagged")
        assert res["metadata"]["fingerprint"] and "not a verdict of truth" in res["comment"]
    assert good["score"] > bad["score"] and good["metadata"]["value"] > bad["metadata"]["value"]


def test_evaluator_reads_messages_documents_and_inputs_context(cal):
    ev = GroundlensEvaluator(key="grounding", calibration=cal)
    res = ev(
        inputs={"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
                "documents": [Document(page_content=CONTEXT)]},
        outputs={"messages": [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": GROUNDED}]},
    )
    assert res["key"] == "grounding" and res["metadata"]["method"] == "sgi"
    assert res["metadata"]["question_key"] == "messages" and res["metadata"]["context_from"] == "inputs.documents"
    no_ctx = ev(inputs={"input": QUESTION}, outputs={"output": GROUNDED})
    assert no_ctx["metadata"]["method"] == "dgi" and no_ctx["score"] is not None


def test_evaluator_missing_fields_give_none_and_a_comment():
    ev = GroundlensEvaluator()
    no_q = ev(inputs={"something": "else"}, outputs={"answer": GROUNDED})
    assert no_q["score"] is None and "no question" in no_q["comment"]
    no_r = ev(inputs={"question": QUESTION}, outputs={})
    assert no_r["score"] is None and "no response" in no_r["comment"]
    weird = ev(inputs=42, outputs=None, reference_outputs=object())
    assert weird["score"] is None and weird["key"] == "groundlens"


def test_evaluate_run_and_evaluate_strings():
    ev = GroundlensEvaluator()
    run = SimpleNamespace(inputs={"query": QUESTION}, outputs={"response": GROUNDED})
    example = SimpleNamespace(inputs={"query": QUESTION}, outputs={"docs": [CONTEXT]})
    res = ev.evaluate_run(run, example)
    assert res["metadata"]["method"] == "sgi" and res["score"] is not None
    s_good = ev.evaluate_strings(prediction=GROUNDED, input=QUESTION, reference=CONTEXT)
    s_bad = ev.evaluate_strings(prediction=UNGROUNDED, input=QUESTION, reference=[CONTEXT])
    for s in (s_good, s_bad):
        assert {"score", "value", "reasoning"} <= set(s) and s["method"] == "sgi"
    assert s_good["score"] > s_bad["score"] and s_good["value"] > s_bad["value"]
    missing = ev.evaluate_strings(prediction=GROUNDED)
    assert missing["score"] is None and "no question" in missing["reasoning"]


# ---------------------------------------------------------------- callback on runnables


def rag_chain():
    """retriever -> prompt -> chat model ``writer``, answering GROUNDED from CONTEXT."""
    retriever = StaticRetriever(docs=[Document(page_content=CONTEXT)])
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from this context:\n{context}"), ("human", "{question}")])
    model = ScriptedModel(respond=lambda msgs: GROUNDED, name="writer")
    return {"context": retriever | (lambda docs: "\n".join(d.page_content for d in docs)),
            "question": RunnablePassthrough()} | prompt | model


def test_callback_on_retriever_prompt_model_chain():
    chain = rag_chain()
    cb = GroundlensCallback()
    out = chain.invoke(QUESTION, config={"callbacks": [cb]})
    assert out.content == GROUNDED
    trace = cb.get_trace()
    assert trace.framework == "langchain" and trace.status == "ok" and trace.ended_at
    assert [(s.kind, s.method) for s in trace.steps] == [("retrieval", "skipped"), ("llm", "sgi")]
    step = trace.steps[1]
    assert step.node == "writer"  # the chat model's name outside a graph
    assert step.question == QUESTION  # the human message, not the system prompt holding the context
    assert [(c.source, c.text) for c in step.context] == [("retriever", CONTEXT)]


class RunParents(BaseCallbackHandler):
    """A plain LangChain handler beside ours: every run's parent run, and the chat model runs."""

    def __init__(self):
        self.parent: dict[str, str | None] = {}
        self.models: list[str] = []

    def _parent(self, run_id, parent_run_id) -> None:
        self.parent[str(run_id)] = None if parent_run_id is None else str(parent_run_id)

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs):
        self._parent(run_id, parent_run_id)

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, **kwargs):
        self._parent(run_id, parent_run_id)

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kwargs):
        self._parent(run_id, parent_run_id)
        self.models.append(str(run_id))


def test_chain_steps_carry_the_run_that_called_them_as_parent():
    chain = rag_chain()
    cb, runs = GroundlensCallback(), RunParents()
    chain.invoke(QUESTION, config={"callbacks": [cb, runs]})
    retrieval, answer = cb.get_trace().steps
    root = cb.get_trace().metadata["root_run_id"]
    assert answer.id == runs.models[0] and answer.parent_id == root  # the sequence called the model
    assert retrieval.parent_id == runs.parent[retrieval.id] != root  # the retriever's own sequence
    assert runs.parent[runs.parent[retrieval.id]] is not None  # ... which sits inside the root's map


def test_callback_on_a_bare_chat_model_and_every_generation(cal):
    cb = GroundlensCallback(calibration=cal)
    model = ScriptedModel(respond=lambda msgs: GROUNDED)
    model.invoke([SystemMessage("Be brief."), HumanMessage(QUESTION)], config={"callbacks": [cb]})
    trace = cb.get_trace()
    [step] = trace.steps
    assert step.node == "ScriptedModel" and step.method == "dgi" and step.question == QUESTION
    assert trace.ended_at  # the model run was the root

    multi = ScriptedModel(respond=lambda msgs: GROUNDED, n=2)
    multi.invoke([HumanMessage(QUESTION)], config={"callbacks": [cb], "metadata": {"groundlens_context": CONTEXT}})
    steps = cb.get_trace().steps
    assert len(steps) == 2 and [s.metadata["generation"] for s in steps] == [[0, 0], [0, 1]]
    assert all(s.method == "sgi" and s.context[0].source == "override" for s in steps)
    assert len({s.id for s in steps}) == 2


def completion_step(template: str, inputs: dict, response: str):
    """The one step the callback records for ``template | FakeListLLM`` answering ``response``."""
    cb = GroundlensCallback()
    (ChatPromptTemplate.from_template(template) | FakeListLLM(responses=[response])).invoke(inputs, config={"callbacks": [cb]})
    [step] = cb.get_trace().steps
    return step


def test_callback_on_a_completion_llm_and_chain_input_context():
    step = completion_step("{question}", {"question": QUESTION, "context": CONTEXT}, GROUNDED)
    assert step.method == "sgi" and QUESTION in step.question
    assert [(c.source, c.text) for c in step.context] == [("state:context", CONTEXT)]


POLICY = ("Unopened items can be returned within 30 days for a full refund. Opened electronics can be returned "
          "within 14 days and are subject to a 15% restocking fee. Refunds are issued to the original payment method "
          "within 5 business days.")
RETURN_Q = "Can I return my opened laptop?"
RETURN_A = "Opened electronics can be returned within 14 days with a 15% restocking fee."


def test_callback_reads_the_context_a_prompt_template_pastes():
    """``prompt | model`` with the policy under an input key the callback does not know: the
    context is the prompt's own, in the system message or around the question in the human one."""
    model = ScriptedModel(respond=lambda msgs: RETURN_A)
    in_system = ChatPromptTemplate.from_messages(
        [("system", "You are a support agent. Answer from this policy:\n{policy}"), ("human", "{question}")])
    in_human = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), ("human", "Answer using this context:\n{policy}\n\nQuestion: {question}")])
    cb = GroundlensCallback()
    for prompt in (in_system, in_human):
        (prompt | model).invoke({"policy": POLICY, "question": RETURN_Q}, config={"callbacks": [cb]})
    system_step, human_step = (t.steps[0] for t in cb.get_traces())
    assert [(c.source, c.text) for c in system_step.context] == [
        ("prompt:system", "You are a support agent. Answer from this policy:\n" + POLICY)]
    assert [(c.source, c.text) for c in human_step.context] == [("prompt:human", POLICY)]  # "Be brief." is no context
    for step in (system_step, human_step):
        assert step.method == "sgi" and step.question == RETURN_Q


def test_callback_on_a_completion_llm_reads_a_context_question_template():
    step = completion_step("Context: {policy}\nQuestion: {question}\nAnswer:", {"policy": POLICY, "question": RETURN_Q},
                           RETURN_A)
    assert step.method == "sgi" and RETURN_Q in step.question and POLICY not in step.question
    assert [(c.source, c.text) for c in step.context] == [("prompt:human", POLICY)]


def test_chain_input_context_keeps_priority_over_prompt_context():
    model = ScriptedModel(respond=lambda msgs: GROUNDED)
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from this policy:\n" + POLICY), ("human", "{question}")])
    cb = GroundlensCallback()
    (prompt | model).invoke({"question": QUESTION, "context": CONTEXT}, config={"callbacks": [cb]})
    (prompt | model).invoke({"question": QUESTION}, config={"callbacks": [cb]})
    with_key, without = (t.steps[0] for t in cb.get_traces())
    assert [(c.source, c.text) for c in with_key.context] == [("state:context", CONTEXT)]
    assert [c.source for c in without.context] == ["prompt:system"]


def test_callback_on_create_agent():
    from langchain.agents import create_agent

    @tool
    def tower_height(name: str) -> str:
        """The height of a famous tower."""
        return CONTEXT

    model = ScriptedModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "tower_height", "args": {"name": "Eiffel"}, "id": "t1"}]),
        AIMessage(content=GROUNDED),
    ]))
    agent = create_agent(model=model, tools=[tower_height], system_prompt="Use your tools.")
    cb = GroundlensCallback()
    agent.invoke({"messages": [HumanMessage(QUESTION)]}, config={"callbacks": [cb]})
    trace = cb.get_trace()
    assert trace.framework == "langchain"
    assert [(s.node, s.kind, s.method) for s in trace.steps] == [
        ("model", "tool_call", "skipped"), ("tools", "tool", "skipped"), ("model", "llm", "sgi")]
    final = trace.steps[-1]
    assert final.question == QUESTION and [c.source for c in final.context] == ["tool:tower_height"]


def test_callback_methods_are_cheap_on_the_callers_thread():
    """Scoring happens on the recorder's worker: a chain returns long before its scores are in.

    The embedder holds every encode until the five calls have returned (at most 60 s): scoring on
    the caller's thread would hold the chain itself, which the test sees. (A bound of 5 s on the
    five calls failed when a loaded machine preempted the caller's thread.)"""
    from groundlens_core import get_embedder

    returned = threading.Event()
    encoders: list[threading.Thread] = []
    held_too_long: list[bool] = []

    class HeldEmbedder:
        def __init__(self, inner):
            self._inner = inner

        def encode(self, texts):
            encoders.append(threading.current_thread())
            held_too_long.append(not returned.wait(60))
            return self._inner.encode(texts)

        def encode_spans(self, texts, spans):  # the evidence's path: whole texts and their sentences
            encoders.append(threading.current_thread())
            held_too_long.append(not returned.wait(60))
            return self._inner.encode_spans(texts, spans)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    cb = GroundlensCallback(embedder=HeldEmbedder(get_embedder()))
    model = ScriptedModel(respond=lambda msgs: GROUNDED)
    for _ in range(5):
        model.invoke([HumanMessage(QUESTION)], config={"callbacks": [cb], "metadata": {"groundlens_context": CONTEXT}})
    returned.set()
    traces = cb.get_traces()
    assert len(traces) == 5 and all(t.steps[0].method == "sgi" for t in traces)
    assert all(t.steps[0].scoring_latency_ms is not None for t in traces)
    assert encoders and threading.current_thread() not in encoders and not any(held_too_long)


def _parallel_fixtures():
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class FixedRetriever(BaseRetriever):
        text: str

        def _get_relevant_documents(self, query, *, run_manager=None):
            return [Document(page_content=self.text)]

    return FixedRetriever


def test_parallel_branches_do_not_see_each_others_documents():
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.runnables import RunnableLambda, RunnableParallel

    FixedRetriever = _parallel_fixtures()

    def branch(text, answer, question):
        llm = GenericFakeChatModel(messages=iter([AIMessage(content=answer)]))
        return (RunnableLambda(lambda x: question) | FixedRetriever(text=text)
                | RunnableLambda(lambda docs: [HumanMessage(content=question)]) | llm)

    chain = RunnableParallel(
        paris=branch("Paris has about 2.1 million inhabitants.", "About 2.1 million people live in Paris.", "Population of Paris?"),
        rome=branch("Rome was founded in 753 BC.", "Rome was founded in 753 BC.", "When was Rome founded?"),
    )
    cb = GroundlensCallback()
    chain.invoke({}, config={"callbacks": [cb]})
    llm_steps = {s.question: s for s in cb.get_trace().steps if s.kind == "llm"}
    assert [p.text for p in llm_steps["Population of Paris?"].context] == ["Paris has about 2.1 million inhabitants."]
    assert [p.text for p in llm_steps["When was Rome founded?"].context] == ["Rome was founded in 753 BC."]


def test_lcel_rag_map_documents_reach_the_model():
    """The usual `{"context": retriever, "question": passthrough} | prompt | llm`: the map is a parallel,
    but the model runs after it, in the enclosing sequence, and must see its documents."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    FixedRetriever = _parallel_fixtures()
    prompt = ChatPromptTemplate.from_messages([("system", "Use: {context}"), ("human", "{question}")])
    llm = GenericFakeChatModel(messages=iter([AIMessage(content="Paris has about 2.1 million inhabitants.")]))
    chain = {"context": FixedRetriever(text="Paris has about 2.1 million inhabitants."), "question": RunnablePassthrough()} | prompt | llm
    cb = GroundlensCallback()
    chain.invoke("Population of Paris?", config={"callbacks": [cb]})
    step = [s for s in cb.get_trace().steps if s.kind == "llm"][0]
    assert step.question == "Population of Paris?" and step.method == "sgi"
    assert [p.source for p in step.context] == ["retriever"]


def test_runs_that_never_end_are_closed_past_the_cap(monkeypatch):
    """Bookkeeping unit test: roots whose end never comes (abandoned streams) are ended, not leaked."""
    import uuid

    import groundlens_core.plugins.langchain.common as common

    monkeypatch.setattr(common, "_MAX_OPEN_ROOTS", 2)
    cb = GroundlensCallback()
    ids = [uuid.uuid4() for _ in range(3)]
    for rid in ids:
        cb.on_chain_start({"name": "chain"}, {"question": "q"}, run_id=rid, parent_run_id=None)
    traces = {t.metadata.get("root_run_id"): t for t in cb.get_traces()}
    first = traces[str(ids[0])]
    assert first.status == "error" and "abandoned" in first.error and first.ended_at
    assert traces[str(ids[2])].ended_at is None


def test_evaluator_scores_a_summary_without_question_against_its_documents():
    ev = GroundlensEvaluator()
    res = ev(inputs={"documents": [Document(page_content=CONTEXT)]}, outputs={"output": UNGROUNDED})
    meta = res["metadata"]
    assert meta["method"] == "support" and res["score"] is not None and meta["question_key"] is None
    assert 0.0 <= meta["support"] <= 1.0 and isinstance(meta["unsupported"], list)
    if meta["unsupported"]:
        assert meta["weakest_sentence"] in UNGROUNDED
    s = ev.evaluate_strings(prediction=GROUNDED, reference=CONTEXT)  # no input: support
    assert s["method"] == "support" and s["score"] is not None
