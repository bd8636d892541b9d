"""The realistic RAG graph the throughput benchmarks drive: a retriever node, then one LLM node.

Every invocation gets unique texts of the sizes seen in real agent steps (measured on traces of
RAG agents): a ~25-word-piece question, a ~179-piece retrieved context and a ~67-piece answer,
about 270 word pieces per scored step. Texts are built from a fixed word list with a seeded RNG, so
a run is reproducible and no two invocations share a text (nothing can be served from a cache).
The model is scripted (sleeps ``delay`` seconds, like a fast API) so the figures measure the
tracing, not a model.
"""

from __future__ import annotations

import random
import time
from typing import Any, TypedDict

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langgraph.graph import END, START, StateGraph

WORDS = (
    "account access active added address after again against agent amount annual answer applied april "
    "archive around attached august automatic available backup balance based before billing branch budget "
    "cancel capacity card cases change charge checked claim client closed cloud company complete confirmed "
    "contact contract copy cost country coverage created credit current customer daily data date days "
    "december default delivery department deposit details device direct discount document during early "
    "email employee enabled energy engine error estimate europe event every exchange expense export "
    "failed february fee field file final first fixed flight folder following form free full fund further "
    "general given group guide health history holiday hotel hours import included income insurance "
    "interest internal invoice issue item january july june keep known language large last later ledger "
    "level license limit list local login loss machine manager march market maximum may member message "
    "method minimum mobile model monday month monthly network night notice number office online open "
    "operator option order original owner package page paid partner password payment pending period "
    "person phone plan policy portal price primary priority private process product project provider "
    "purchase quarter queue rate reason receipt record refund region regular release remote renewal "
    "report request required reset result retail return review rule safety salary sales saturday "
    "schedule second section secure security september service session settings shared shipping short "
    "signed single size small software standard statement status storage store subscription summary "
    "sunday supplier support system team terms thursday ticket total track training transfer travel "
    "tuesday unit update upgrade usage user valid value vendor version warehouse wednesday week weekly "
    "window within workspace year yearly zone"
).split()

#: words per text, chosen so the texts come out at about 25 / 179 / 67 word pieces with [CLS]/[SEP]
QUESTION_WORDS, CONTEXT_WORDS, ANSWER_WORDS = 20, 150, 56


def _sentence_text(rng: random.Random, n_words: int, question: bool = False) -> str:
    out, sentence = [], []
    for i in range(n_words):
        sentence.append(rng.choice(WORDS))
        if len(sentence) >= rng.randint(8, 16) or i == n_words - 1:
            s = " ".join(sentence)
            out.append(s[0].upper() + s[1:] + ("?" if question and i == n_words - 1 else "."))
            sentence = []
    return " ".join(out)


def make_texts(n: int, seed: int = 13) -> list[tuple[str, str, str]]:
    """``n`` unique (question, context, answer) triples."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out = []
    while len(out) < n:
        q = _sentence_text(rng, QUESTION_WORDS, question=True)
        if q in seen:
            continue
        seen.add(q)
        out.append((q, _sentence_text(rng, CONTEXT_WORDS), _sentence_text(rng, ANSWER_WORDS)))
    return out


class TableRetriever(BaseRetriever):
    """Returns the context stored for a question (a dict lookup: no search cost in the figures)."""

    table: dict[str, str]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [Document(page_content=self.table[query], metadata={"source": "kb"})]


class TableChatModel(GenericFakeChatModel):
    """Answers the last human message from a table after sleeping ``delay`` seconds."""

    table: dict[str, str]
    delay: float = 0.0
    messages: Any = iter(())

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        question = next(m.content for m in reversed(messages) if m.type == "human")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=self.table[question], response_metadata={"model_name": "scripted"}))])


class RagState(TypedDict, total=False):
    question: str
    documents: list[Document]
    answer: str


def build_rag_graph(texts: list[tuple[str, str, str]], delay: float = 0.0):
    """retrieve -> answer over ``texts`` (question -> context, question -> answer)."""
    retriever = TableRetriever(table={q: c for q, c, _ in texts})
    model = TableChatModel(table={q: a for q, _, a in texts}, delay=delay)

    def retrieve(state: RagState) -> dict:
        return {"documents": retriever.invoke(state["question"])}

    def answer(state: RagState) -> dict:
        context = "\n\n".join(d.page_content for d in state["documents"])
        msg = model.invoke([SystemMessage(f"Answer only from this context:\n{context}"), HumanMessage(state["question"])])
        return {"answer": msg.content}

    g = StateGraph(RagState)
    g.add_node("retrieve", retrieve)
    g.add_node("answer", answer)
    g.add_edge(START, "retrieve")
    g.add_edge("retrieve", "answer")
    g.add_edge("answer", END)
    return g.compile()
