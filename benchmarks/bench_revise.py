"""What the revision loop costs a LangGraph step: the inline scoring the router does before its edge.

    python benchmarks/bench_revise.py [--runs 20] [--delay 0.05]

Three graphs over the same scripted model (it sleeps ``--delay`` seconds per call, like a fast
API), each traced by the LangGraph callback as a user runs it, measured interleaved in one run:

1. ``plain``: ``answer -> END``, no loop (the step as it is without revision);
2. ``loop``: ``answer -> route -> END``: the router scores the (correct) answer in line, then accepts;
3. ``revised``: ``answer -> route -> revise -> answer -> route -> END``: a wrong first answer is sent
   back once and the second is accepted (two LLM calls, two inline scores).

Every run uses new texts (a contract number in the question, source and answer), so neither the
loop's nor the embedder's cache serves a repeat. Reported: median wall time per run, the inline
cost per step (``loop`` - ``plain``) in ms and as a ratio, the cost of a revised step (``revised``
- ``plain``, i.e. one more LLM call and two inline scores), the router's own scoring time, and,
interleaved with the graphs, one plain ``evaluate()`` of the same kind of texts: the loop's cost
in units of the core's, which holds on a loaded machine where the milliseconds do not.
The embedding model is loaded before timing.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from measures import scripted_model_options

from groundlens_core import evaluate, get_embedder
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback, GroundlensReviser


class FeeState(MessagesState):
    context: str


class FeeModel(GenericFakeChatModel):
    """Answers the fee of the contract in its source: wrong (25 %) the first time when ``wrong_first``,
    right (15 %) once it has had feedback."""

    delay: float = 0.05
    wrong_first: bool = False
    messages: Any = iter(())

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        time.sleep(self.delay)
        number = messages[0].content.split("Contract ", 1)[1].split(":", 1)[0]
        revised = messages[-1].type == "human" and messages[-1].additional_kwargs
        fee = "25" if self.wrong_first and not revised else "15"
        text = f"For contract {number} you pay an early-termination fee of {fee} % of the remaining contract value."
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def build(model: FeeModel, reviser: GroundlensReviser | None) -> Any:
    def answer(state: FeeState) -> dict:
        return {"messages": [model.invoke([SystemMessage(state["context"]), *state["messages"]])]}

    g = StateGraph(FeeState)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    if reviser is None:
        g.add_edge("answer", END)
    else:
        g.add_node("revise", reviser.revise)
        g.add_conditional_edges("answer", reviser.route, {"revise": "revise", "accept": END})
        g.add_edge("revise", "answer")
    return g.compile()


def inputs(i: int) -> dict:
    source = (
        f"Contract {i}: cancelling before the end of the term costs an early-termination fee of 15 % "
        "of the remaining contract value."
    )
    return {"messages": [HumanMessage(f"What does it cost to cancel contract {i} early?")], "context": source}


def main(argv: list[str] | None = None) -> int:
    args = scripted_model_options(__doc__.splitlines()[0], runs=20).parse_args(argv)

    get_embedder().encode(["warm up the embedding model"])  # one-off load, not what we measure
    cb = GroundlensLangGraphCallback(name="bench")
    reviser = GroundlensReviser(cb, max_revisions=1)
    graphs = {
        "plain": build(FeeModel(delay=args.delay), None),
        "loop": build(FeeModel(delay=args.delay), reviser),
        "revised": build(FeeModel(delay=args.delay, wrong_first=True), reviser),
    }
    for k, graph in enumerate(graphs.values()):  # warm up langgraph and the scoring path
        graph.invoke(inputs(-1 - k), config={"callbacks": [cb]})
    cb.flush()

    times: dict[str, list[float]] = {name: [] for name in graphs}
    inline_ms: list[float] = []
    evaluate_ms: list[float] = []
    for run in range(args.runs):
        given = inputs(10_000 + run)
        answer = (
            f"For contract {10_000 + run} you pay an early-termination fee of 15 % of the remaining contract value."
        )
        t0 = time.perf_counter()
        evaluate(given["messages"][0].content, answer, [given["context"]])
        evaluate_ms.append((time.perf_counter() - t0) * 1000.0)
        for k, (name, graph) in enumerate(graphs.items()):
            i = run * len(graphs) + k
            t0 = time.perf_counter()
            out = graph.invoke(inputs(i), config={"callbacks": [cb]})
            times[name].append(time.perf_counter() - t0)
            assert "15 %" in out["messages"][-1].content, out["messages"][-1].content
            if name == "loop":
                found = reviser.check(out)
                if found is not None:
                    inline_ms.append(found.inline.latency_ms)
        cb.flush()  # the background scores of this round, off the clock of the next

    med = {name: statistics.median(v) * 1000.0 for name, v in times.items()}
    inline = med["loop"] - med["plain"]
    print(f"one LLM step with a {args.delay * 1000:.0f} ms scripted model, {args.runs} runs of each graph, interleaved")
    print(
        f"wall time per run (median): plain {med['plain']:.1f} ms, with the loop (accepted) {med['loop']:.1f} ms, "
        f"revised once {med['revised']:.1f} ms"
    )
    print(f"inline cost per step: {inline:.1f} ms ({med['loop'] / med['plain']:.2f}x the plain step)")
    print(
        f"a revised step: +{med['revised'] - med['plain']:.1f} ms over the plain step "
        f"({med['revised'] / med['plain']:.2f}x: one more LLM call and two inline scores)"
    )
    one = statistics.median(evaluate_ms)
    if inline_ms:
        print(f"the router's own scoring time (InlineResult.latency_ms): median {statistics.median(inline_ms):.1f} ms")
    print(
        f"one evaluate() of such texts, interleaved: median {one:.1f} ms -> inline cost per step = {inline / one:.2f}x it"
    )
    trace = cb.get_trace()
    print(f"last trace: {trace.summary() if trace is not None else 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
