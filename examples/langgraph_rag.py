"""A LangGraph RAG support bot, traced with groundlens: retrieve -> answer -> report, offline.

    python examples/langgraph_rag.py --out out/

Three customer questions fan out (``Send``) to a ``qa`` subgraph (``retrieve`` from an in-memory
vector store embedded with the same MiniLM model groundlens uses, then ``answer``); a ``report`` node
summarises the answers. The chat model is scripted, so the run is deterministic and needs no API
key. One answer is deliberately ungrounded (it contradicts the refund policy it retrieved): the
report shows it flagged, next to the grounded ones. Writes ``out/trace.json`` and ``out/report.html``.

Scores are triage signals that rank which outputs a human should review first, not verdicts of truth.
"""

from __future__ import annotations

import argparse
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from groundlens_core import get_embedder
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback

KNOWLEDGE_BASE = [
    "Refund policy: annual subscriptions can be refunded in full within 30 days of purchase; after 30 days, "
    "refunds are prorated for the unused months. Monthly plans are not refundable.",
    "Support hours: the Acme Cloud support desk answers chat and email from 8:00 to 20:00 CET, Monday to Friday. "
    "Enterprise customers have a 24/7 phone line.",
    "Data export: workspace owners can export all projects as JSON or CSV from Settings > Export. "
    "Exports larger than 2 GB are split into several files and emailed as download links.",
    "Password reset: users reset their password from the sign-in page with the 'Forgot password' link; "
    "the reset email expires after 60 minutes.",
    "Data retention: deleted projects stay in the trash for 30 days and are then erased permanently, "
    "including their backups.",
]

# question -> what the scripted model answers (the second one ignores what was retrieved)
SCRIPT = {
    "How long do I have to get a refund on an annual plan?":
        "Annual subscriptions can be refunded in full within 30 days of purchase; after that the refund is "
        "prorated for the unused months.",
    "Can I get a refund on my annual plan after two months?":
        "Yes, annual plans are refundable at any time, no questions asked, for the full price.",
    "How do I export my projects?":
        "Workspace owners can export every project as JSON or CSV from Settings > Export; very large exports "
        "arrive as several download links by email.",
}
REPORT = ("Three refund and export questions answered today; one refund answer promised a full refund at any "
          "time and should be checked against the policy.")


class MiniLMEmbeddings(Embeddings):
    """LangChain embeddings backed by groundlens' own embedder (all-MiniLM-L6-v2, offline)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return get_embedder().encode(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that answers by looking up the last human message in ``script``."""

    script: dict[str, str]
    default: str = "I am not sure."
    messages: Any = iter(())

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        question = next((m.content for m in reversed(messages) if m.type == "human"), "")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=self.script.get(question, self.default), response_metadata={"model_name": "scripted-support-v1"},
        ))])


class DeskState(TypedDict, total=False):
    questions: list[str]
    answers: Annotated[list[str], operator.add]
    report: str


class QAState(TypedDict, total=False):
    question: str
    documents: list[Document]
    answers: Annotated[list[str], operator.add]


def build_graph(model, retriever):
    def retrieve(state: QAState) -> dict:
        return {"documents": retriever.invoke(state["question"])}

    def answer(state: QAState) -> dict:
        context = "\n\n".join(d.page_content for d in state["documents"])
        msg = model.invoke([SystemMessage("You are Acme Cloud's support assistant. Answer only from this "
                                          f"context:\n{context}"), HumanMessage(state["question"])])
        return {"answers": [msg.content]}

    qa = StateGraph(QAState)
    qa.add_node("retrieve", retrieve)
    qa.add_node("answer", answer)
    qa.add_edge(START, "retrieve")
    qa.add_edge("retrieve", "answer")
    qa.add_edge("answer", END)

    def fan_out(state: DeskState) -> list[Send]:
        return [Send("qa", {"question": q}) for q in state["questions"]]

    def report(state: DeskState) -> dict:
        # the report is written from the answers: say so explicitly (groundlens_context)
        msg = model.invoke([HumanMessage("Write today's one-line support report.")],
                           config={"metadata": {"groundlens_context": state["answers"]}})
        return {"report": msg.content}

    desk = StateGraph(DeskState)
    desk.add_node("qa", qa.compile())
    desk.add_node("report", report)
    desk.add_conditional_edges(START, fan_out, ["qa"])
    desk.add_edge("qa", "report")
    desk.add_edge("report", END)
    return desk.compile()


def run_support_desk(cb: GroundlensLangGraphCallback):
    """Run the support-desk graph once with ``cb`` attached; (the graph's result, its trace)."""
    store = InMemoryVectorStore(embedding=MiniLMEmbeddings())
    store.add_documents([Document(page_content=t, metadata={"id": i}) for i, t in enumerate(KNOWLEDGE_BASE)])
    model = ScriptedChatModel(script={**SCRIPT, "Write today's one-line support report.": REPORT})
    graph = build_graph(model, store.as_retriever(search_kwargs={"k": 2}))
    result = graph.invoke({"questions": list(SCRIPT)}, config={"callbacks": [cb]})
    return result, cb.get_trace()  # get_trace waits for the background scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for trace.json and report.html (default: out/)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    result, trace = run_support_desk(GroundlensLangGraphCallback(name="support-desk-rag"))

    trace.save(out / "trace.json")
    print(f"report: {result['report']}")
    print(f"\ntrace {trace.id}: {trace.summary(riskiest_first=True)}")
    print("\nreview first (riskiest first):")
    for step in trace.riskiest(5, scored_only=True):
        print(f"  {step.label:24s} {step.node:12s} {step.question!s:.60}")
        print(f"  {'':24s} -> {step.response!s:.90}")
    print(f"\nwrote {out / 'trace.json'}")
    try:
        from groundlens_core.trace.html import write_html
    except ImportError:
        print("note: the HTML report renderer (groundlens_core.trace.html) is not available; wrote JSON only")
    else:
        write_html([trace], out / "report.html", title="groundlens: LangGraph RAG support desk")
        print(f"wrote {out / 'report.html'}")
    print("\nScores are triage signals for ranking what to review first, not verdicts of truth.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
