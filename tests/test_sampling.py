"""Live sampling on a real LangGraph graph (only the model is scripted): ``sample_rate`` keeps a share
of the runs, decided by the run's trace key alone; ``nodes`` / ``skip_nodes`` keep or leave out nodes;
every call left out is counted on its trace (``Trace.unsampled``, ``summary()``), never silently missing."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import HumanMessage
from scripted_graphs import QAState, TableChatModel, linear_graph

from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
from groundlens_core.trace import Recorder
from groundlens_core.trace.recorder.sampling import Sampling, sampling_of, trace_fraction

QUESTION = "How tall is the Eiffel Tower?"
PLAN = "Look up the height of the Eiffel Tower."
ANSWER = "The Eiffel Tower is 330 metres tall."


class State(QAState, total=False):
    plan: str


def two_step_graph():
    model = TableChatModel(table={QUESTION: ANSWER, f"Plan: {QUESTION}": PLAN})

    def plan(state: State) -> dict:
        return {"plan": model.invoke([HumanMessage(f"Plan: {state['question']}")]).content}

    def answer(state: State) -> dict:
        return {"answer": model.invoke([HumanMessage(state["question"])]).content}

    return linear_graph(State, plan=plan, answer=answer)


def run_ids(n: int, *, kept: bool, rate: float) -> list[uuid.UUID]:
    """``n`` fixed run ids whose traces a ``rate`` sampling keeps (or leaves out): the test knows
    beforehand which runs are sampled, by the same hash the recorder uses."""
    out, i = [], 0
    while len(out) < n and i < 10_000:  # bounded: half of all ids fall on each side at rate 0.5
        rid = uuid.uuid5(uuid.NAMESPACE_URL, f"groundlens-sampling-{i}")
        if (trace_fraction(str(rid)) < rate) == kept:
            out.append(rid)
        i += 1
    assert len(out) == n
    return out


def invoke(graph, cb, run_id: uuid.UUID | None = None) -> None:
    config = {"callbacks": [cb], **({"run_id": run_id} if run_id else {})}
    graph.invoke({"question": QUESTION, "context": "The Eiffel Tower is 330 metres tall."}, config=config)


def test_sample_rate_keeps_whole_runs_decided_by_the_trace_key_and_counts_the_rest():
    graph, rate = two_step_graph(), 0.5
    kept, left = run_ids(3, kept=True, rate=rate), run_ids(3, kept=False, rate=rate)
    cb = GroundlensLangGraphCallback(sample_rate=rate)
    for rid in (kept[0], left[0], kept[1], left[1], kept[2], left[2]):
        invoke(graph, cb, rid)
    traces = {t.metadata["root_run_id"]: t for t in cb.get_traces()}
    assert set(traces) == {str(r) for r in kept + left}  # every run has its trace, sampled or not
    for rid in kept:
        t = traces[str(rid)]
        assert [s.node for s in t.steps if s.kind == "llm"] == ["plan", "answer"] and t.unsampled == 0
        assert "not sampled" not in t.summary()
    for rid in left:
        t = traces[str(rid)]
        assert t.steps == [] and t.unsampled == 2  # both model calls, counted, not scored
        assert t.summary().startswith("0 steps | 2 not sampled")
        assert t.to_dict()["metadata"]["unsampled"] == 2  # in the saved JSON too
    # the same keys, another process or adapter: the same decision
    again = GroundlensLangGraphCallback(sample_rate=rate)
    invoke(graph, again, kept[0])
    invoke(graph, again, left[0])
    assert [len(t.steps) > 0 for t in again.get_traces()] == [True, False]


def test_node_filters_keep_or_leave_out_nodes_and_count_what_they_leave_out():
    graph = two_step_graph()
    only_answer = GroundlensLangGraphCallback(nodes=["answer"])
    without_answer = GroundlensLangGraphCallback(skip_nodes=["answer"])
    for cb in (only_answer, without_answer):
        invoke(graph, cb)
    a, b = only_answer.get_trace(), without_answer.get_trace()
    assert [s.node for s in a.steps if s.kind == "llm"] == ["answer"] and a.unsampled == 1
    assert [s.node for s in b.steps if s.kind == "llm"] == ["plan"] and b.unsampled == 1
    assert a.steps[0].method == "sgi"  # what is kept is scored as before
    everything = GroundlensLangGraphCallback()
    invoke(graph, everything)
    t = everything.get_trace()
    assert [s.node for s in t.steps if s.kind == "llm"] == ["plan", "answer"] and t.unsampled == 0
    assert everything.recorder.sampling is None  # the default keeps every call and costs nothing


def test_sample_rate_zero_records_no_step_and_a_shared_recorder_keeps_its_own_sampling():
    graph = two_step_graph()
    cb = GroundlensLangGraphCallback(sample_rate=0)
    invoke(graph, cb)
    t = cb.get_trace()
    assert t.steps == [] and t.unsampled == 2 and t.counts()["flagged"] == 0
    shared = Recorder("langgraph")
    shared.sampling = Sampling(rate=1.0, skip_nodes=frozenset({"plan"}))
    GroundlensLangGraphCallback(recorder=shared)  # no sampling given: the recorder's stays
    assert shared.sampling.skip_nodes == {"plan"}


@pytest.mark.parametrize("rate", [1.5, -0.1, float("nan"), "0.5", True])
def test_a_sample_rate_outside_zero_to_one_is_refused_at_construction(rate):
    with pytest.raises(ValueError, match="sample_rate"):
        GroundlensLangGraphCallback(sample_rate=rate)


def test_sampling_matches_a_nested_node_by_its_last_name_and_a_string_is_one_node():
    s = sampling_of(1.0, nodes="answer")
    assert s is not None and s.keeps_node("answer") and s.keeps_node("sub/answer") and not s.keeps_node("a")
    assert sampling_of() is None and sampling_of(1, None, ()) is None
    assert 0.0 <= trace_fraction("k") < 1.0 and trace_fraction("k") == trace_fraction("k")
