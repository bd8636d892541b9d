"""Context a prompt carries itself, the fallback when no other context was found: a substantive
system message (``prompt:system``) and the last human message beyond its question
(``prompt:human``). The rules: docs/context.md. Pure text functions, cheap enough for a callback."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from groundlens_core.trace.model import ContextPiece
from groundlens_core.trace.recorder.inputs import last_user_index, message_role, message_text

#: content words (outside persona / instruction sentences) a text needs to count as context
SUBSTANTIVE_WORDS = 10
#: words of prompt text (system messages and the last human message) above which a call scored
#: without context is worth a warning
LONG_PROMPT_WORDS = 40
#: only this many characters of a text are examined (the pieces keep the whole text)
_SCAN_CHARS = 20_000

SYSTEM_SOURCE = "prompt:system"
HUMAN_SOURCE = "prompt:human"

_STOPWORDS = frozenset(
    """
    the and for are but not you your yours all any can had her was one our out has have him his how its
    may new now own she too use who why did does doing done get got let lets put say says see than that
    them then there these they this those through was were what when where which while whom will with
    would could should shall might must from into onto over under upon about above after again against
    also been before being below between both down during each few further here just more most much
    other off only same some such very yet able via per every either neither whether because until
    ours ourselves yourself yourselves itself themselves himself herself theirs their there's it's
    i'm you're we're they're don't doesn't didn't isn't aren't wasn't weren't can't cannot won't
    """.split()
)

# a persona or an instruction to the model, at the start of a sentence or a bullet: verbs that tell a
# model how to behave (not ones a customer-facing policy uses too, such as "return", "contact", "send")
_INSTRUCTION = re.compile(
    r"""^\W*(?:please\s+)?(?:
        (?:you\s+are|you're)\s+(?:a|an|the|now|not|to|going|given|allowed|expected|helping|working)\b
        | you\s+(?:must|should|will|may|can|need\s+to)\s+(?:not|never|always|only|answer|respond|reply|use|ask
            |help|assist|provide|call|cite|be|keep|avoid|include|explain|refuse|greet|act)\b
        | act\s+as\b | your\s+(?:role|task|job|goal|name|purpose|answers?|responses?|replies)\b
        | as\s+an?\s+(?:ai|assistant|language)\b | (?:i\s+am|i'm)\s+an?\s+(?:ai|assistant|language)\b
        | always\b | never\b | do\s+not\b | don't\b | be\b | answer\b | respond\b | reply\b | use\b | keep\b
        | only\s+(?:answer|respond|reply|use)\b | make\s+sure\b | think\b | cite\b | provide\b | avoid\b
        | format\b | write\b | stay\b | say\b | refuse\b | remember\b | follow\b | ensure\b | base\b
        | help\b | assist\b | ask\b | greet\b | confirm\b | consider\b | try\b | include\b | explain\b
        | give\b | limit\b | output\b | summari[sz]e\b | translate\b | tell\b | mention\b | focus\b
        | speak\b | talk\b | show\b | prefer\b | offer\b | guide\b | handle\b | treat\b | adopt\b
        | maintain\b | call\s+(?:the|a|tools?)\b | search\b | look\s+up\b
        | (?:if|when)\s+(?:the\s+user|asked|answering|responding|replying|you\s+(?:answer|respond|reply))\b
        | the\s+user\b | in\s+your\s+(?:answers?|responses?|replies|reply)\b
        | if\s+(?:you|the\s+(?:answer|context|question|information))\s+(?:don't|do\s+not|does\s+not|doesn't
            |can't|cannot|are\s+(?:not|unsure)|is\s+not|isn't)\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_WORD = re.compile(r"[^\W\d_][\w'’-]{2,}|\d[\d.,:%]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_PARAGRAPH = re.compile(r"\n\s*\n")

# section labels before a ":": at a line start, or (the long forms) after a sentence on the same line
_Q_LABELS = r"question|user\s+question|query|q"
_C_LABELS = r"context|contexts|documents?|docs|sources?|passages?|retrieved\s+context|background|policy|excerpts?"
_A_LABELS = r"answer|a|response|helpful\s+answer"
_LINE_LABEL = re.compile(rf"[ \t]*(?:[#*>]+[ \t]*)?({_Q_LABELS}|{_C_LABELS}|{_A_LABELS})[ \t]*\**[ \t]*", re.IGNORECASE)
_INLINE_LABEL = re.compile(r"(?:^|(?<=[.!?\s]))[ \t]*(question|context|documents|sources)[ \t]*$", re.IGNORECASE)
_TAGS = r"question|query|context|documents?|sources?|passages?"
_Q_TAGS = ("question", "query")
_TAG_OPEN = re.compile(rf"<({_TAGS})\b[^<>]{{0,200}}>", re.IGNORECASE)
_TAG_CLOSE = re.compile(rf"</({_TAGS})\s*>", re.IGNORECASE)
_TAG_ANY = re.compile(rf"</?(?:{_TAGS})\b[^<>]{{0,200}}>", re.IGNORECASE)
_ROLE_PREFIX = re.compile(r"^(?:human|user)[ \t]*:[ \t]*", re.IGNORECASE)  # a chat prompt rendered as one string
_EDGE_COLONS = 256  # with more ":" than twice this, only the first and last ones are read as labels
_HEADER = re.compile(r"^[^\n]{1,160}:[ \t]*$")  # a short line ending in ":" ("Answer using this context:")


_Q_KIND = re.compile(_Q_LABELS, re.IGNORECASE)
_A_KIND = re.compile(_A_LABELS, re.IGNORECASE)


def _kind(label: str) -> str:
    """``q`` (question), ``a`` (answer) or ``c`` (context) for a section label."""
    if _Q_KIND.fullmatch(label):
        return "q"
    if _A_KIND.fullmatch(label):
        return "a"
    return "c"


def _edge_colons(text: str) -> list[int]:
    """Positions of the first and the last :data:`_EDGE_COLONS` colons (all of them when fewer): a
    template's labels sit around the pasted text, not inside it."""
    head: list[int] = []
    i = text.find(":")
    while i >= 0 and len(head) < _EDGE_COLONS:
        head.append(i)
        i = text.find(":", i + 1)
    if i < 0:
        return head
    tail: list[int] = []
    j = text.rfind(":")
    while j > head[-1] and len(tail) < _EDGE_COLONS:
        tail.append(j)
        j = text.rfind(":", 0, j)
    return head + tail[::-1]


def _labels(text: str) -> list[tuple[str, int, int]]:
    """(kind ``q``/``c``/``a``, start, end after the ":") of each section label; looks back only
    from each ":" (a regular expression tried at every position costs far more on long prompts)."""
    out = []
    for i in _edge_colons(text):
        low = max(0, i - 41)
        newline = text.rfind("\n", low, i)  # bounded: a long line with many ":" stays linear
        line_start = newline + 1 if newline >= 0 else (0 if low == 0 else low)
        if newline >= 0 or low == 0:
            whole_line = _LINE_LABEL.fullmatch(text, line_start, i)
            if whole_line:
                out.append((_kind(whole_line.group(1)), line_start, i + 1))
                continue
        window = max(line_start, i - 30)
        inline = _INLINE_LABEL.search(text[window:i])
        if inline:
            out.append((_kind(inline.group(1)), window + inline.start(1), i + 1))
    return out


def content_words(text: str, enough: int | None = None) -> int:
    """Content words of ``text`` outside persona / instruction sentences and header lines (counting
    stops at ``enough``)."""
    count = 0
    for sentence in _SENTENCE_END.split(text[:_SCAN_CHARS]):
        sentence = sentence.strip()
        if not sentence or _INSTRUCTION.match(sentence) or (_HEADER.match(sentence) and len(sentence.split()) <= 12):
            continue
        count += sum(1 for w in _WORD.findall(sentence) if w.lower() not in _STOPWORDS)
        if enough is not None and count >= enough:
            break
    return count


def is_substantive(text: str | None) -> bool:
    """Whether ``text`` carries source text, not only a persona or instructions (see the module doc)."""
    return bool(text) and content_words(text or "", SUBSTANTIVE_WORDS) >= SUBSTANTIVE_WORDS


def _clean(text: str) -> str:
    """Context text without leading header lines ("Answer using this context:") and blank edges."""
    lines = text.strip().split("\n")
    while lines and (not lines[0].strip() or (_HEADER.match(lines[0].strip()) and len(lines[0].split()) <= 12)):
        lines.pop(0)
    return "\n".join(lines).strip()


@dataclass(frozen=True)
class HumanSplit:
    """A human message read as a question plus the source text pasted around it (None when there is none)."""

    question: str
    context: str | None


def _tagged(text: str) -> list[tuple[str, int, int]]:
    """(tag, start, end) of each ``<tag>…</tag>`` section, outermost first; linear in the text
    (each opening tag is paired with the first closing tag of its name after it)."""
    closes: dict[str, list[tuple[int, int]]] = {}
    for m in _TAG_CLOSE.finditer(text):
        closes.setdefault(m.group(1).lower(), []).append((m.start(), m.end()))
    out: list[tuple[str, int, int]] = []
    if not closes:
        return out
    done = 0  # a section starts after the previous one ended: nested or unclosed tags are text
    for m in _TAG_OPEN.finditer(text):
        tag = m.group(1).lower()
        if m.start() < done or tag not in closes:
            continue
        ends = closes[tag]
        k = bisect.bisect_left(ends, (m.end(), 0))
        if k < len(ends):
            out.append((tag, m.end(), ends[k][0]))
            done = ends[k][1]
    return out


def _by_tags(text: str) -> HumanSplit | None:
    sections = _tagged(text)
    if not sections:
        return None
    questions = [text[a:b].strip() for tag, a, b in sections if tag in _Q_TAGS]
    contexts = [text[a:b].strip() for tag, a, b in sections if tag not in _Q_TAGS and text[a:b].strip()]
    if questions and questions[-1]:
        context = "\n\n".join(contexts) if contexts else _TAG_ANY.sub("", text)
        return HumanSplit(questions[-1], _clean(context) or None)
    if contexts:
        untagged, pos = [], 0
        for _tag, a, b in sections:
            untagged.append(text[pos:a])
            pos = b
        untagged.append(text[pos:])
        question = _clean(_TAG_ANY.sub("", "".join(untagged)))
        if question:
            return HumanSplit(question, "\n\n".join(contexts))
    return None


def _by_labels(text: str) -> HumanSplit | None:
    marks = _labels(text)
    if not any(kind == "q" for kind, _, _ in marks):
        return None
    sections: list[tuple[str, str]] = [("pre", text[: marks[0][1]])]
    for i, (kind, _start, end) in enumerate(marks):
        stop = marks[i + 1][1] if i + 1 < len(marks) else len(text)
        sections.append((kind, text[end:stop]))
    question = next((body.strip() for kind, body in reversed(sections) if kind == "q" and body.strip()), "")
    if not question:
        return None
    labelled = [body.strip() for kind, body in sections if kind == "c" and body.strip()]
    rest = labelled or [_clean(body) for kind, body in sections if kind == "pre" and body.strip()]
    context = "\n\n".join(r for r in rest if r)
    return HumanSplit(question, context or None)


def _by_question_mark(text: str) -> HumanSplit | None:
    """The last paragraph when it ends in "?", else the first one when it does; in one paragraph,
    its last sentence ending in "?". A "?" in a middle paragraph is no question marker."""
    paragraphs = [p.strip() for p in _PARAGRAPH.split(text) if p.strip()]
    if paragraphs[-1].endswith("?"):
        question, before = paragraphs[-1], paragraphs[:-1]
        if not before:  # one paragraph: its last sentence ending in "?" is the question
            tail = question[-2000:]
            breaks = [m.end() for m in re.finditer(r"[.!?]\s+|\n", tail[:-1])]
            if not breaks:
                return None
            cut = len(question) - len(tail) + breaks[-1]
            question, before = question[cut:].strip(), [question[:cut]]
        return HumanSplit(question, _clean("\n\n".join(before)) or None)
    if len(paragraphs) > 1 and paragraphs[0].endswith("?"):
        return HumanSplit(paragraphs[0], "\n\n".join(paragraphs[1:]))
    return None


_TASK_LINE = re.compile(
    r"^\W*(?:please\s+)?(?:summari[sz]e|translate|rewrite|paraphrase|classify|extract|explain|analy[sz]e|review"
    r"|proofread|answer|describe|list|read|using|based\s+on|given|use|from)\b[^\n]*:$",
    re.IGNORECASE,
)


def _by_leading_instruction(text: str) -> HumanSplit | None:
    first, _, rest = text.strip().partition("\n")
    if _TASK_LINE.match(first.strip()) and rest.strip():
        return HumanSplit(first.strip(), rest.strip())
    return None


def split_question(text: str) -> HumanSplit:
    """The question of a human message and the substantive text around it; a message whose other
    text is not substantive is all question."""
    whole = HumanSplit(text.strip(), None)
    if not text.strip():
        return whole
    for reader in (_by_tags, _by_labels, _by_question_mark, _by_leading_instruction):
        split = reader(text)
        if split is not None:
            question = _ROLE_PREFIX.sub("", split.question).strip()
            if question and is_substantive(split.context):
                return HumanSplit(question, split.context)
            return whole
    return whole


@dataclass(frozen=True)
class PromptReading:
    """What a model call's prompt says: its question, the context it carries, and how long it is."""

    question: str | None
    pieces: tuple[ContextPiece, ...]
    words: int  # words of system messages and the last human message: a long prompt scored without context warns


def read_messages(messages: Sequence[Any]) -> PromptReading:
    """Question and ``prompt:system`` / ``prompt:human`` pieces of a chat model's input messages."""
    pieces: list[ContextPiece] = []
    words = 0
    for message in messages:
        if message_role(message) == "system":
            text = message_text(message).strip()
            words += len(text[:_SCAN_CHARS].split())
            if is_substantive(text):
                pieces.append(ContextPiece(text=text, source=SYSTEM_SOURCE))
    i = last_user_index(messages)
    question = None
    if i is not None:
        text = message_text(messages[i])
        words += len(text[:_SCAN_CHARS].split())
        split = split_question(text)
        question = split.question or None
        if split.context:
            pieces.append(ContextPiece(text=split.context, source=HUMAN_SOURCE))
    return PromptReading(question, tuple(pieces), words)


def read_prompt(prompt: str) -> PromptReading:
    """A completion model's prompt string, read like one human message."""
    return read_messages([{"role": "user", "content": prompt}])
