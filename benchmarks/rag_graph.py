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
import sys
from pathlib import Path
from typing import TypedDict

from langchain_core.documents import Document
from langchain_core.messages import HumanMessage, SystemMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the scripted parts live with the tests
from scripted_graphs import TableChatModel, TableRetriever, linear_graph  # noqa: E402

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


class RagState(TypedDict, total=False):
    question: str
    documents: list[Document]
    answer: str


def build_rag_graph(texts: list[tuple[str, str, str]], delay: float = 0.0):
    """retrieve -> answer over ``texts`` (question -> context, question -> answer)."""
    retriever = TableRetriever(table={q: c for q, c, _ in texts}, source="kb")
    model = TableChatModel(table={q: a for q, _, a in texts}, delay=delay, reported_model="scripted")

    def retrieve(state: RagState) -> dict:
        return {"documents": retriever.invoke(state["question"])}

    def answer(state: RagState) -> dict:
        context = "\n\n".join(d.page_content for d in state["documents"])
        msg = model.invoke([SystemMessage(f"Answer only from this context:\n{context}"), HumanMessage(state["question"])])
        return {"answer": msg.content}

    return linear_graph(RagState, retrieve=retrieve, answer=answer)
