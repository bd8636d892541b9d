"""How much the LangGraph callback costs a graph: time on the graph's thread and wall-time overhead.

    python benchmarks/bench_langgraph_overhead.py [--runs 30] [--delay 0.05]

The graph is a tool-calling agent (StateGraph + ToolNode: a tool-call turn, a tool, an answer; two
LLM calls per run) whose scripted model sleeps ``--delay`` seconds per call, like a fast API.

1. In-callback time: every callback method is wrapped with a perf_counter accumulator; the figure is
   the time spent inside our methods per run divided by the LLM calls of that run (median, p95 over
   runs). Target < 1 ms per LLM call. Scoring is not in it: it runs on the recorder's worker thread,
   but that worker shares the GIL, so the wall figure includes GIL waits; the thread-CPU figure is
   the translation work alone.
2. Wall-time overhead: ``--runs`` runs with no handler, with a no-op handler (LangChain's own callback
   machinery) and with the groundlens callback, interleaved; median run time of each and the relative
   difference. Target <= 5 %. Scoring runs in the background meanwhile. On a busy machine the run
   times are noisy: run it on an otherwise idle one.
3. ``get_trace()`` after the runs (waiting for the pending scores), timed separately.

The embedding model is loaded before timing (a one-off ~2-3 s per process, on the worker thread).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from measures import pct, scripted_model_options

from groundlens_core import get_embedder
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the scripted graphs live with the tests
from scripted_graphs import tool_agent_graph  # noqa: E402

CALLBACK_METHODS = (
    "on_chain_start", "on_chain_end", "on_chain_error", "on_chat_model_start", "on_llm_start", "on_llm_end",
    "on_llm_error", "on_tool_start", "on_tool_end", "on_tool_error", "on_retriever_start", "on_retriever_end",
    "on_retriever_error",
)


@tool
def lookup(topic: str) -> str:
    """Facts about a topic."""
    return f"{topic} was founded in 1998 and employs 1,200 people across four countries."


class SlowScriptedModel(GenericFakeChatModel):
    """Calls a tool on the first turn of a conversation, answers from the tool output on the second."""

    delay: float = 0.05
    messages: Any = iter(())

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        time.sleep(self.delay)
        if messages[-1].type == "human":
            msg = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"topic": messages[-1].content[:20]},
                                                     "id": f"call-{time.perf_counter_ns()}"}])
        else:
            msg = AIMessage(content=f"According to the lookup: {messages[-1].content}")
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools, **kwargs):
        return self


def build_graph(model):
    return tool_agent_graph(model, [lookup], "Answer with the tool's facts.")


class Stopwatch:
    """Per-thread accumulator of time spent inside the wrapped callback methods."""

    def __init__(self) -> None:
        self.local = threading.local()

    def reset(self) -> None:
        self.local.total = 0.0
        self.local.cpu = 0.0
        self.local.calls = 0

    @property
    def total(self) -> float:
        return getattr(self.local, "total", 0.0)

    @property
    def cpu(self) -> float:
        return getattr(self.local, "cpu", 0.0)

    def wrap(self, cls: type) -> None:
        for name in CALLBACK_METHODS:
            original = getattr(cls, name)

            def timed(self_, *args, __original=original, **kwargs):
                t0, c0 = time.perf_counter(), time.thread_time()
                try:
                    return __original(self_, *args, **kwargs)
                finally:
                    self.local.total = getattr(self.local, "total", 0.0) + time.perf_counter() - t0
                    self.local.cpu = getattr(self.local, "cpu", 0.0) + time.thread_time() - c0
                    self.local.calls = getattr(self.local, "calls", 0) + 1

            setattr(cls, name, timed)


class NoopHandler(BaseCallbackHandler):
    """A handler that does nothing: what LangChain's callback machinery costs by itself."""

    run_inline = True

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    args = scripted_model_options(__doc__.splitlines()[0], runs=30).parse_args(argv)

    get_embedder().encode(["warm up the embedding model"])  # one-off load, not what we measure
    graph = build_graph(SlowScriptedModel(delay=args.delay))
    question = {"messages": [HumanMessage("Tell me about Acme Corporation.")]}
    for _ in range(3):  # warm up langgraph itself
        graph.invoke(question)

    watch = Stopwatch()
    watch.wrap(GroundlensLangGraphCallback)
    cb = GroundlensLangGraphCallback(name="bench")

    noop = NoopHandler()
    without, with_noop, with_cb, per_llm_ms, per_llm_cpu_ms = [], [], [], [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        graph.invoke(question)
        without.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        graph.invoke(question, config={"callbacks": [noop]})
        with_noop.append(time.perf_counter() - t0)

        watch.reset()
        t0 = time.perf_counter()
        graph.invoke(question, config={"callbacks": [cb]})
        with_cb.append(time.perf_counter() - t0)
        per_llm_ms.append(watch.total * 1000.0 / 2)  # two LLM calls per run (sync graph: one thread)
        per_llm_cpu_ms.append(watch.cpu * 1000.0 / 2)

    t0 = time.perf_counter()
    cb.get_trace()
    get_trace_ms = (time.perf_counter() - t0) * 1000.0
    traces = cb.get_traces()
    steps = sum(len(t.steps) for t in traces)
    scored = [s for t in traces for s in t.steps if s.method in ("sgi", "dgi")]
    scoring_ms = statistics.median(s.scoring_latency_ms for s in scored) if scored else float("nan")

    med_without, med_noop, med_with = statistics.median(without), statistics.median(with_noop), statistics.median(with_cb)
    overhead = (med_with - med_without) / med_without * 100.0
    overhead_noop = (med_with - med_noop) / med_noop * 100.0
    print(f"graph: tool-calling agent, 2 LLM calls x {args.delay * 1000:.0f} ms + 1 tool per run; {args.runs} runs each")
    print(f"in-callback time per LLM call (graph's thread): median {statistics.median(per_llm_ms):.3f} ms, "
          f"p95 {pct(per_llm_ms, 0.95):.3f} ms  (target < 1 ms)")
    print(f"  of which CPU time of the graph's thread: median {statistics.median(per_llm_cpu_ms):.3f} ms "
          f"(the rest is waiting for the GIL / the OS scheduler while the scoring worker runs)")
    print(f"wall time per run (median): no handler {med_without * 1000:.1f} ms, a no-op handler "
          f"{med_noop * 1000:.1f} ms, groundlens {med_with * 1000:.1f} ms")
    print(f"  -> overhead {overhead:+.2f} % vs no handler (target <= 5 %), {overhead_noop:+.2f} % vs a no-op handler")
    print(f"get_trace() after the runs (waits for pending scores): {get_trace_ms:.1f} ms")
    print(f"recorded: {len(traces)} traces, {steps} steps, {len(scored)} scored; "
          f"median scoring time per scored step (worker thread): {scoring_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
