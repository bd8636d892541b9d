"""Reading the context a prompt carries: which text is the question, which is source text, and
which system prompts are only a persona. Pure text functions (the callbacks' use of them is tested
on real graphs in test_langgraph_plugin.py and test_langchain_plugin.py)."""

from __future__ import annotations

import pytest

from groundlens_core.trace.recorder.prompt_context import is_substantive, read_messages, read_prompt, split_question

POLICY = ("Unopened items can be returned within 30 days for a full refund. Opened electronics can be returned "
          "within 14 days and are subject to a 15% restocking fee. Refunds are issued to the original payment method "
          "within 5 business days.")
Q = "Can I return my opened laptop?"
HUB = ("You are an assistant for question-answering tasks. Use the following pieces of retrieved context to answer "
       "the question. If you don't know the answer, just say that you don't know. Use three sentences maximum and "
       "keep the answer concise.\nQuestion: {q} \nContext: {c} \nAnswer:")


@pytest.mark.parametrize("text, question, context", [
    (f"Answer using this context:\n{POLICY}\n\nQuestion: {Q}", Q, POLICY),
    (f"Context: {POLICY} Question: {Q}", Q, POLICY),
    (f"Context:\n{POLICY}\n\nQ: {Q}\nA:", Q, POLICY),
    (HUB.format(q=Q, c=POLICY), Q, POLICY),  # the LangChain hub rag-prompt: question first, instructions left out
    (f"{POLICY}\n\n{Q}", Q, POLICY),
    (f"{POLICY} {Q}", Q, POLICY),  # one paragraph: its last sentence is the question
    (f"Is this policy fair to customers?\n\n{POLICY}", "Is this policy fair to customers?", POLICY),
    (f"<context>\n{POLICY}\n</context>\n<question>{Q}</question>", Q, POLICY),
    (f"Summarize the following text:\n{POLICY}", "Summarize the following text:", POLICY),
])
def test_rag_templates_split_into_question_and_context(text, question, context):
    split = split_question(text)
    assert (split.question, split.context) == (question, context)


@pytest.mark.parametrize("text", [
    "How tall is the Eiffel Tower?",
    "What is a restocking fee? Explain it in simple words.",  # the rest is not substantive
    f"Frequently asked questions\n\nCan I return items?\n\nYes. {POLICY}\n\nList the return windows.",  # a FAQ's "?"
    f"Our policy:\n{POLICY}",  # a leading line ending in ":" that is no task
])
def test_messages_without_a_separable_context_stay_whole(text):
    split = split_question(text)
    assert (split.question, split.context) == (text.strip(), None)


@pytest.mark.parametrize("text, substantive", [
    ("You are a helpful assistant.", False),
    ("You are a careful assistant. Always answer in one sentence.", False),
    (HUB.split("\n")[0], False),  # instructions only, however long
    ("This is a friendly chat assistant that helps users with everyday questions.", False),
    ("You are a travel agent.\n- Greet the customer by name.\n- Ask for travel dates and destinations.\n"
     "- Confirm the total price before booking.\n- Never book without explicit consent.\n"
     "- Keep answers short and friendly.", False),  # an agent's rules, however many
    ("You are a support agent. Answer from this policy:\n" + POLICY, True),
    ("Returns: opened electronics 14 days, 15% fee; unopened 30 days; refunds in 5 business days to the card.", True),
])
def test_a_system_prompt_is_context_only_when_it_carries_source_text(text, substantive):
    assert is_substantive(text) is substantive


def test_read_messages_and_read_prompt_label_their_sources():
    reading = read_messages([("system", "Answer from this policy:\n" + POLICY), ("human", f"{POLICY}\n\n{Q}")])
    assert reading.question == Q
    assert [p.source for p in reading.pieces] == ["prompt:system", "prompt:human"]
    assert reading.words > 40
    completion = read_prompt(f"Context: {POLICY}\nQuestion: {Q}\nAnswer:")
    assert completion.question == Q and [(p.source, p.text) for p in completion.pieces] == [("prompt:human", POLICY)]
    rendered = read_prompt(f"System: Answer from this policy:\n{POLICY}\nHuman: {Q}")  # a chat template as one string
    assert rendered.question == Q and [(p.source, p.text) for p in rendered.pieces] == [("prompt:human", POLICY)]
