"""What the LangChain callback keeps per run (plain data), and the pure readers it applies to
LangChain events: a run's LangGraph task, the context a call can see, texts, names and usage."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from groundlens_core.plugins.kit.shell import parse_usage
from groundlens_core.trace.model import ContextPiece, Usage
from groundlens_core.trace.recorder.inputs import (
    as_text,
    context_from,
    message_text,
    short,
)

_MODEL_KEYS = ("model", "model_name", "model_id", "deployment_name", "azure_deployment")
_INTERRUPTS = ("GraphInterrupt", "NodeInterrupt", "Interrupt")
_LONG_STATE_CHARS = 200  # a state value this long is named in the no-context warning as a likely context key


@dataclass
class Task:
    """One LangGraph task (a node execution), known by its checkpoint namespace."""

    ns: str
    step: int | None
    start_seq: int
    run_id: str = ""  # the node's own run: the parent of the steps made inside it
    end_seq: int | None = None
    inputs: list[StateValue] = field(default_factory=list)  # state keys the node received
    outputs: list[StateValue] = field(default_factory=list)  # state keys the node wrote
    state: Any = None  # the state the node received: its long keys are read for a warning, on the worker


@dataclass
class Root:
    """One root run: one trace."""

    run_ids: list[str] = field(default_factory=list)
    seq: int = 0
    tasks: dict[str, Task] = field(default_factory=dict)
    task_runs: dict[str, str] = field(default_factory=dict)  # run id -> ns of the task it opened
    root_pieces: list[StateValue] = field(default_factory=list)  # context keys of the root input
    root_input: Any = None  # the root input: its long keys are read for a warning, on the worker
    # (task ns, the retriever's ancestor runs as (run id, name) nearest first, document)
    retrieved: list[tuple[str, tuple[tuple[str, str], ...], ContextPiece]] = field(default_factory=list)
    tool_call_steps: dict[str, str] = field(default_factory=dict)  # tool_call_id -> tool_call step id
    tool_steps: dict[str, str] = field(default_factory=dict)  # tool_call_id -> the tool step that ran it
    last_llm: dict[str, str] = field(default_factory=dict)  # node -> its latest LLM step with text (revision_of)

    def tick(self) -> int:
        self.seq += 1
        return self.seq

    def parent_of(self, rid: str, ns: str, parent_run_id: str | None) -> str | None:
        """The parent id of a step made by run ``rid``: the run of the nearest enclosing LangGraph
        node (one namespace up for the node's own run), else the run that called it."""
        while ns:
            task = self.tasks.get(ns)
            if task is not None and task.run_id and task.run_id != rid:
                return task.run_id
            ns = ns.rpartition("|")[0]
        return parent_run_id


@dataclass
class Run:
    root: str
    ns: str
    node: str
    started_at: float
    name: str = ""
    parent: str | None = None  # the LangChain parent run
    parent_step: str | None = None  # the step's parent_id (see Root.parent_of)
    # LLM runs
    prompt: Any = None  # its prompts, read when its end is translated (a prompt.PromptRead)
    model: str | None = None
    provider: str | None = None
    otel_span: Any = None  # an instrumentor's span of the LLM call (an app_span.SpanRef; instrumentor_spans)
    # tool / retriever runs
    input_text: str | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    revision_of: str | None = None  # an LLM run answering again after a revision loop's feedback


def md_str(metadata: Mapping[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    return value if isinstance(value, str) and value else None


def node_path(ns: str, metadata: Mapping[str, Any]) -> str | None:
    """``parent/child`` from a checkpoint namespace ``parent:<task id>|child:<task id>``."""
    names = [seg.split(":", 1)[0] for seg in ns.split("|")]
    return "/".join(n for n in names if n) or md_str(metadata, "langgraph_node")


def serialized_name(serialized: Any) -> str | None:
    if isinstance(serialized, Mapping):
        name = serialized.get("name")
        if isinstance(name, str) and name:
            return name
        ids = serialized.get("id")
        if isinstance(ids, list) and ids and isinstance(ids[-1], str):
            return ids[-1]
    return None


def model_name(*sources: Any) -> str | None:
    for src in sources:
        if isinstance(src, Mapping):
            for key in _MODEL_KEYS:
                value = src.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


def usage_of(message: Any, llm_output: Any) -> Usage | None:
    return parse_usage(getattr(message, "usage_metadata", None)) or parse_usage(llm_output)


def tool_output_text(output: Any) -> str | None:
    """Readable text of what a tool returned (a ToolMessage, a Command, a string, anything)."""
    if output is None:
        return None
    if isinstance(output, str):
        return output
    if hasattr(output, "content"):
        return message_text(output)
    update = getattr(output, "update", None)  # langgraph Command
    if isinstance(update, Mapping):
        msgs = update.get("messages")
        if isinstance(msgs, (list, tuple)):
            return "\n\n".join(t for t in (message_text(m) for m in msgs) if t) or None
    return as_text(output) or short(output, 2000)


def run_key(run_id: Any) -> str:
    """``str(run_id)``, remembered for the runs in flight: every callback of a run turns its UUID
    (and its parent's) into a key, about twenty times per model call, at a microsecond or two each."""
    try:
        return _run_key(run_id)
    except TypeError:  # an unhashable id: not LangChain's UUIDs, but never a failure
        return str(run_id)


@functools.lru_cache(maxsize=4096, typed=True)
def _run_key(run_id: Any) -> str:
    return str(run_id)


def is_interrupt(error: BaseException) -> bool:
    return any(cls.__name__ in _INTERRUPTS for cls in type(error).__mro__)


@dataclass(frozen=True)
class StateValue:
    """A context key's value as the state held it, made into ``state:<key>`` pieces only when a
    model call's context is read (on the worker: :func:`expand_state`). A list is kept as a tuple of
    its documents' texts, so what a node appends or changes in place later is not read into an
    earlier call's context."""

    key: str
    value: Any


def state_values(context_keys: Sequence[str], value: Any) -> list[StateValue]:
    """The values of ``context_keys`` in a state, an update, a Command or a list of them, unread
    (:func:`expand_state` makes them pieces): what the agent's thread keeps."""
    if value is None or not context_keys:
        return []
    if type(value) is dict:  # a LangGraph state or update, the common case: no generic checks (agent's thread)
        found = [(key, value.get(key)) for key in context_keys]
        return [StateValue(key, _now(item)) for key, item in found if item is not None]
    if isinstance(value, (list, tuple)):
        out: list[StateValue] = []
        for item in value[:64]:
            if isinstance(item, Mapping) or hasattr(item, "update"):
                out.extend(state_values(context_keys, item))
        return out
    if isinstance(value, (str, bytes, int, float)):
        return []
    if not isinstance(value, Mapping):
        update = getattr(value, "update", None)  # langgraph Command(update=...)
        if update is not None and not callable(update):
            return state_values(context_keys, update)
    out = []
    for key in context_keys:
        item = value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)
        if item is not None:
            out.append(StateValue(key, _now(item)))
    return out


def _now(value: Any) -> Any:
    """A state value as it is now: a list or tuple of documents as a tuple of their texts
    (:func:`documents_now`), anything else as it is."""
    return documents_now(value) if isinstance(value, (list, tuple)) else value


def documents_now(documents: Any) -> Any:
    """What a retriever returned, with its documents' texts read now, on the agent's thread: a node
    may still change a document in place (compress it) after the retrieval step was made."""
    if not isinstance(documents, (list, tuple)):
        return documents
    out = []
    for doc in documents:
        plain = doc is None or isinstance(doc, (str, bytes, bytearray, tuple, ContextPiece))
        text = None if plain else as_text(doc)
        out.append(doc if text is None else text)
    return tuple(out)


def expand_state(items: Sequence[Any]) -> list[Any]:
    """``items`` with every :class:`StateValue` made into its pieces (other items as they are)."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, StateValue):
            out.extend(context_from(item.value, source=f"state:{item.key}"))
        else:
            out.append(item)
    return out


def state_pieces(context_keys: Sequence[str], value: Any) -> list[ContextPiece]:
    """``state:<key>`` pieces of ``context_keys`` in a state, an update, a Command or a list of them
    (:func:`state_values`, read at once)."""
    return expand_state(state_values(context_keys, value))


def long_keys(context_keys: Sequence[str], value: Any) -> tuple[str, ...]:
    """Keys of a state mapping, other than ``context_keys`` and ``messages``, whose value is long
    text: named in the no-context warning as the likely place of the context."""
    if not isinstance(value, Mapping):
        return ()
    out = []
    for key, item in list(value.items())[:64]:
        if not isinstance(key, str) or key in context_keys or key == "messages":
            continue
        text = item if isinstance(item, str) else as_text(item) if isinstance(item, (list, tuple)) else None
        if text is not None and len(text) >= _LONG_STATE_CHARS:
            out.append(key)
    return tuple(out)


def hint_keys(context_keys: Sequence[str], *states: Any) -> tuple[str, ...]:
    """The long keys of the first of ``states`` that has any (the node's input, then the root's);
    () when they cannot be read: a hint for a warning never fails the step it is about. Read on the
    worker, only when that warning is due, from the mappings the runs received (a later change to
    one can only change the keys the warning names)."""
    try:
        for state in states:
            keys = long_keys(context_keys, state)
            if keys:
                return keys
    except Exception:
        return ()
    return ()


def _earlier(root: Root, x: str, t: str) -> bool:
    """Whether what task ``x`` produced was there when task ``t`` ran: ``x`` is ``t``, its ancestor
    or descendant, or ``x``'s branch ran in an earlier superstep. Parallel branches never see each other."""
    if not x or not t or x == t:
        return True
    xs, ts = x.split("|"), t.split("|")
    for i in range(min(len(xs), len(ts))):
        if xs[i] == ts[i]:
            continue
        xa, ta = root.tasks.get("|".join(xs[: i + 1])), root.tasks.get("|".join(ts[: i + 1]))
        if xa is None or ta is None:
            return False
        if xa.step is not None and ta.step is not None:
            return xa.step < ta.step
        return xa.end_seq is not None and xa.end_seq < ta.start_seq
    return True  # one is inside the other


def _visible_outside_graph(doc_chain: tuple[tuple[str, str], ...], llm_ancestors: set[str]) -> bool:
    """Outside LangGraph (no namespaces): a document is hidden from a call in another branch of
    the same ``RunnableParallel``, i.e. when their nearest common run is a parallel."""
    for rid, name in doc_chain:
        if rid in llm_ancestors:
            return not name.startswith("RunnableParallel")
    return True


def collected_context(root: Root | None, ns: str, llm_ancestors: set[str]) -> list[ContextPiece | StateValue]:
    """Retriever documents and state values visible to a call in task ``ns``, in that order; the
    state values unread (:func:`expand_state` reads them)."""
    if root is None:
        return []
    retrieved = [
        p
        for task_ns, chain, p in root.retrieved
        if (_earlier(root, task_ns, ns) if (task_ns and ns) else _visible_outside_graph(chain, llm_ancestors))
    ]
    out: list[ContextPiece | StateValue] = [*retrieved, *root.root_pieces]
    own = root.tasks.get(ns) if ns else None
    if own is not None:
        out.extend(own.inputs)
    for task in root.tasks.values():
        if task.outputs and task.end_seq is not None and task.ns != ns and _earlier(root, task.ns, ns):
            out.extend(task.outputs)
    return out
