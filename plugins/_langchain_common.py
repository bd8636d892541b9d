"""The LangChain callback translation shared by the LangGraph and LangChain plugins: one implementation.

:class:`GroundlensCallbackBase` is a ``BaseCallbackHandler`` that turns LangChain run events into
:class:`~groundlens_core.trace.CallRecord` s for a :class:`~groundlens_core.trace.Recorder`:

* every root run (``parent_run_id`` None, or a parent this handler never saw) is one trace, keyed by
  the root run id; every run id maps to its root, so concurrent invocations never mix;
* an LLM call is read at its start (question, context, node, model) and recorded at its end (response,
  usage); the recorder scores it on its own thread (SGI with context, DGI without);
* tool and retriever runs are recorded as ``tool``/``retrieval`` steps (not scored: they are context).

Where a call's context comes from, in this order (each piece keeps its source):

``override``        ``config={"metadata": {"groundlens_context": "..." | [...]}}`` (added to the rest)
``tool:<name>``     tool messages after the last human message of the model's input
``retriever``       documents returned by retrievers earlier in the same root run and branch
``state:<key>``     values of the state keys ``context_keys`` the node received, or that earlier
                    graph nodes (earlier supersteps, never a parallel branch) wrote
``prompt:system``   only when none of the above gave anything: a system message of the model's
``prompt:human``    input that carries substantive text, and the text of the last human message
                    beyond its question (a RAG template's pasted context); see ``_prompt_context``

A call still left without context while its prompt carried long text is scored with DGI, and its
node gets one warning (once per handler) that says how to name the context (``context_keys``).

``config={"metadata": {"groundlens_question": "..."}}`` replaces the question (by default the last
human message of the model's input, without the context a RAG template pasted around it: never the
system prompt).

Callback methods only translate and append; nothing here embeds text on the caller's thread, and no
exception leaves a callback method (it is logged and recorded as an ``error`` step instead).
Scores are triage signals for ranking outputs for human review, not verdicts of truth.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from groundlens_core.plugins._common import (
    as_text,
    last_user_index,
    merge_pieces,
    message_role,
    message_text,
    pieces_from_value,
    short,
)
from groundlens_core.plugins._prompt_context import LONG_PROMPT_WORDS, PromptReading, read_messages, read_prompt
from groundlens_core.plugins._shell import AdapterShell, handle_internal_errors, optional_base, parse_usage, require
from groundlens_core.trace.model import META_TOOL, ContextPiece, Usage
from groundlens_core.trace.recorder import CallRecord

# the base class only; nothing else from LangChain is needed at import time
_HandlerBase: Any = optional_base("langchain_core.callbacks", "BaseCallbackHandler")

#: config metadata keys a user can set to give a call's context / question explicitly
CONTEXT_OVERRIDE_KEY = "groundlens_context"
QUESTION_OVERRIDE_KEY = "groundlens_question"
DEFAULT_CONTEXT_KEYS: tuple[str, ...] = ("context", "documents", "docs")

_MODEL_KEYS = ("model", "model_name", "model_id", "deployment_name", "azure_deployment")
_MAX_OPEN_ROOTS = 1000  # roots whose end never came (abandoned streams) are dropped past this
_INTERRUPTS = ("GraphInterrupt", "NodeInterrupt", "Interrupt")
_LONG_STATE_CHARS = 200  # a state value this long is named in the no-context warning as a likely context key


# ---------------------------------------------------------------- per-run bookkeeping


@dataclass
class _Task:
    """One LangGraph task (a node execution), known by its checkpoint namespace."""

    ns: str
    step: int | None
    start_seq: int
    end_seq: int | None = None
    inputs: list[ContextPiece] = field(default_factory=list)  # state keys the node received
    outputs: list[ContextPiece] = field(default_factory=list)  # state keys the node wrote
    long_keys: tuple[str, ...] = ()  # other state keys the node received holding long text


@dataclass
class _Root:
    key: str
    name: str
    run_ids: list[str] = field(default_factory=list)
    seq: int = 0
    tasks: dict[str, _Task] = field(default_factory=dict)
    task_runs: dict[str, str] = field(default_factory=dict)  # run id -> ns of the task it opened
    root_pieces: list[ContextPiece] = field(default_factory=list)  # context keys of the root input
    root_long_keys: tuple[str, ...] = ()  # other keys of the root input holding long text
    # (task ns, the retriever's ancestor runs as (run id, name) nearest first, document)
    retrieved: list[tuple[str, tuple[tuple[str, str], ...], ContextPiece]] = field(default_factory=list)
    tool_call_steps: dict[str, str] = field(default_factory=dict)  # tool_call_id -> tool_call step id

    def tick(self) -> int:
        self.seq += 1
        return self.seq


@dataclass
class _Run:
    root: str
    ns: str
    node: str
    started_at: float
    name: str = ""
    parent: str | None = None
    # LLM runs
    questions: list[str | None] = field(default_factory=list)
    contexts: list[list[ContextPiece]] = field(default_factory=list)
    model: str | None = None
    provider: str | None = None
    # tool / retriever runs
    input_text: str | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def _error_target(self: GroundlensCallbackBase, *args: Any, **kwargs: Any) -> tuple[str | None, str | None]:
    """(trace key, node) of the run a failing callback was about: its root's trace and its node."""
    run_id = kwargs.get("run_id")
    rid = str(run_id) if run_id is not None else None
    with self._lock:
        run = self._runs.get(rid) if rid else None
    return (run.root, run.node) if run is not None else (rid, None)


#: every callback method: nothing it raises reaches LangChain; it is logged and recorded as an
#: ``error`` step in the run's trace instead
_guarded = handle_internal_errors(trace_key=_error_target)


# ---------------------------------------------------------------- small readers


def _md_str(metadata: Mapping[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    return value if isinstance(value, str) and value else None


def node_path(ns: str, metadata: Mapping[str, Any]) -> str | None:
    """``parent/child`` from a checkpoint namespace ``parent:<task id>|child:<task id>``."""
    if ns:
        names = [seg.split(":", 1)[0] for seg in ns.split("|") if seg]
        names = [n for n in names if n]
        if names:
            return "/".join(names)
    return _md_str(metadata, "langgraph_node")


def _serialized_name(serialized: Any) -> str | None:
    if isinstance(serialized, Mapping):
        name = serialized.get("name")
        if isinstance(name, str) and name:
            return name
        ids = serialized.get("id")
        if isinstance(ids, list) and ids and isinstance(ids[-1], str):
            return ids[-1]
    return None


def _model_name(*sources: Any) -> str | None:
    for src in sources:
        if isinstance(src, Mapping):
            for key in _MODEL_KEYS:
                value = src.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


def _usage(message: Any, llm_output: Any) -> Usage | None:
    return parse_usage(getattr(message, "usage_metadata", None)) or parse_usage(llm_output)


def _tool_name_for(messages: Sequence[Any], index: int) -> str:
    """The tool that produced ``messages[index]``: its ``name``, else the matching earlier tool call."""
    msg = messages[index]
    name = msg.get("name") if isinstance(msg, Mapping) else getattr(msg, "name", None)
    if isinstance(name, str) and name:
        return name
    call_id = msg.get("tool_call_id") if isinstance(msg, Mapping) else getattr(msg, "tool_call_id", None)
    if call_id:
        for prev in reversed(messages[:index]):
            for call in getattr(prev, "tool_calls", None) or []:
                if isinstance(call, Mapping) and call.get("id") == call_id and call.get("name"):
                    return str(call["name"])
    return "tool"


def tool_message_pieces(messages: Sequence[Any]) -> list[ContextPiece]:
    """Tool outputs the model saw for its current question: tool messages after the last human message."""
    start = last_user_index(messages)
    out = []
    for i in range(0 if start is None else start + 1, len(messages)):
        if message_role(messages[i]) in ("tool", "function"):
            text = message_text(messages[i]).strip()
            if text:
                out.append(ContextPiece(text=text, source=f"tool:{_tool_name_for(messages, i)}"))
    return out


def _tool_output_text(output: Any) -> str | None:
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


def _is_interrupt(error: BaseException) -> bool:
    return any(cls.__name__ in _INTERRUPTS for cls in type(error).__mro__)


# ---------------------------------------------------------------- the handler


class GroundlensCallbackBase(AdapterShell, _HandlerBase):
    """Records every LLM call of a LangChain / LangGraph run as a trace step, scored off-thread.

    Subclasses set :attr:`framework` (also the logger, ``groundlens.<framework>``) and :attr:`extra`.
    One instance serves any number of invocations, concurrently (threads or asyncio); each root run
    is its own trace. The constructor is the shell's (:class:`AdapterShell`), plus ``context_keys``.
    """

    framework = "langchain"
    extra = "langchain"

    # our methods are cheap and thread-safe: run them in line (in order, no executor hop) in async runs
    run_inline = True
    raise_error = False

    def __init__(
        self,
        name: str | None = None,
        *,
        context_keys: Sequence[str] = DEFAULT_CONTEXT_KEYS,
        **shell: Any,
    ):
        if _HandlerBase is object:
            require("langchain_core.callbacks", self.extra, "langchain-core")
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._roots: dict[str, _Root] = {}
        self.context_keys = tuple(context_keys)
        self._warned_nodes: set[str] = set()  # nodes already warned about long prompts scored without context
        super().__init__(name=name, **shell)

    # ------------------------------------------------------------ bookkeeping

    def _open_run(
        self,
        run_id: Any,
        parent_run_id: Any,
        metadata: Mapping[str, Any] | None,
        name: str,
        inputs: Any = None,
        tags: Any = None,
    ) -> _Run:
        """Register a run under its root (opening a new trace for a root run) and its LangGraph task."""
        rid = str(run_id)
        md = metadata or {}
        ns = md.get("langgraph_checkpoint_ns")
        ns = ns if isinstance(ns, str) else ""
        new_root: _Root | None = None
        with self._lock:
            parent = self._runs.get(str(parent_run_id)) if parent_run_id is not None else None
            if parent is None:
                new_root = _Root(key=rid, name=self.name or name or self.framework)
                self._roots[rid] = new_root
                if len(self._roots) > _MAX_OPEN_ROOTS:
                    abandoned = next(iter(self._roots))
                    self._drop_root(abandoned)
                    self.recorder.end_trace(abandoned, error="abandoned: the run never ended (too many open runs)")
                root_key = rid
            else:
                root_key = parent.root
            root = self._roots.get(root_key)
            if root is not None:
                root.run_ids.append(rid)
                if ns and ns not in root.tasks:  # the first run of a task is the node's own run
                    step = md.get("langgraph_step")
                    task = _Task(ns=ns, step=step if isinstance(step, int) else None, start_seq=root.tick())
                    task.inputs = self._state_pieces(inputs)
                    task.long_keys = self._long_keys(inputs)
                    root.tasks[ns] = task
                    root.task_runs[rid] = ns
                elif new_root is not None and inputs is not None:
                    root.root_pieces = self._state_pieces(inputs)
                    root.root_long_keys = self._long_keys(inputs)
            run = _Run(
                root=root_key,
                ns=ns,
                node=node_path(ns, md) or name or "run",
                started_at=time.time(),
                name=name,
                parent=str(parent_run_id) if parent_run_id is not None else None,
            )
            self._runs[rid] = run
        if new_root is not None:
            meta: dict[str, Any] = {"root_run_id": rid, "root_run_name": name}
            for key in ("thread_id", "langgraph_thread_id"):
                if md.get(key) is not None:
                    meta["thread_id"] = str(md[key])
            if tags:
                meta["tags"] = [str(t) for t in tags][:20]
            self.recorder.start_trace(rid, name=new_root.name, metadata=meta)
        return run

    def _drop_root(self, key: str) -> None:
        root = self._roots.pop(key, None)
        if root is not None:
            for rid in root.run_ids:
                self._runs.pop(rid, None)

    def _close_run(self, run_id: Any) -> tuple[_Run | None, bool]:
        """Forget a finished run; (its run, whether it was a root run). Ends the root's trace bookkeeping."""
        rid = str(run_id)
        with self._lock:
            run = self._runs.get(rid)
            if run is None:
                return None, False
            if run.root == rid:
                self._drop_root(rid)
                return run, True
            root = self._roots.get(run.root)
            if root is not None:
                ns = root.task_runs.pop(rid, None)
                if ns is not None and ns in root.tasks:
                    root.tasks[ns].end_seq = root.tick()
            return run, False

    def _state_pieces(self, value: Any) -> list[ContextPiece]:
        """``state:<key>`` pieces of the configured context keys in a state, an update, a Command or a list of them."""
        if value is None or not self.context_keys:
            return []
        if isinstance(value, (list, tuple)):
            out: list[ContextPiece] = []
            for item in value[:64]:
                if isinstance(item, Mapping) or hasattr(item, "update"):
                    out.extend(self._state_pieces(item))
            return out
        if not isinstance(value, Mapping):
            update = getattr(value, "update", None)  # langgraph Command(update=...)
            if update is not None and not callable(update):
                return self._state_pieces(update)
        out = []
        for key in self.context_keys:
            if isinstance(value, Mapping):
                item = value.get(key)
            elif isinstance(value, (str, bytes, int, float)):
                return []
            else:
                item = getattr(value, key, None)
            if item is not None:
                out.extend(pieces_from_value(item, f"state:{key}"))
        return out

    def _long_keys(self, value: Any) -> tuple[str, ...]:
        """Keys of a state mapping, other than ``context_keys`` and ``messages``, whose value is long
        text: named in the no-context warning as the likely place of the context."""
        if not isinstance(value, Mapping):
            return ()
        out = []
        for key, item in list(value.items())[:64]:
            if not isinstance(key, str) or key in self.context_keys or key == "messages":
                continue
            text = item if isinstance(item, str) else as_text(item) if isinstance(item, (list, tuple)) else None
            if text is not None and len(text) >= _LONG_STATE_CHARS:
                out.append(key)
        return tuple(out)

    @staticmethod
    def _earlier(root: _Root, x: str, t: str) -> bool:
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

    def _chain(self, parent: str | None) -> tuple[tuple[str, str], ...]:
        """(run id, name) of ``parent`` and its open ancestors, nearest first (caller holds the lock)."""
        out: list[tuple[str, str]] = []
        while parent is not None and len(out) < 256:
            run = self._runs.get(parent)
            if run is None:
                break
            out.append((parent, run.name))
            parent = run.parent
        return tuple(out)

    @staticmethod
    def _visible_outside_graph(doc_chain: tuple[tuple[str, str], ...], llm_ancestors: set[str]) -> bool:
        """Outside LangGraph (no namespaces): a document is hidden from a call in another branch of
        the same ``RunnableParallel``, i.e. when their nearest common run is a parallel."""
        for rid, name in doc_chain:
            if rid in llm_ancestors:
                return not name.startswith("RunnableParallel")
        return True

    def _collected_context(
        self, root: _Root | None, ns: str, llm_ancestors: set[str] | None = None
    ) -> list[ContextPiece]:
        """Retriever documents and state values visible to a call in task ``ns`` (caller holds the lock)."""
        if root is None:
            return []
        ancestors = llm_ancestors or set()
        retrieved = [
            p
            for task_ns, chain, p in root.retrieved
            if (self._earlier(root, task_ns, ns) if (task_ns and ns) else self._visible_outside_graph(chain, ancestors))
        ]
        state: list[ContextPiece] = list(root.root_pieces)
        own = root.tasks.get(ns) if ns else None
        if own is not None:
            state.extend(own.inputs)
        for task in root.tasks.values():
            if task.outputs and task.end_seq is not None and task.ns != ns and self._earlier(root, task.ns, ns):
                state.extend(task.outputs)
        return merge_pieces(retrieved, state)

    def _end_root(self, key: str, error: BaseException | None = None) -> None:
        if error is not None and _is_interrupt(error):  # human-in-the-loop pause, not a failure
            self.recorder.annotate_trace(key, {"interrupted": True})
            error = None
        elif isinstance(error, GeneratorExit):  # the caller stopped consuming a stream early
            self.recorder.annotate_trace(key, {"stopped_early": True})
            error = None
        self.recorder.end_trace(key, error=None if error is None else f"{type(error).__name__}: {error}")

    # ------------------------------------------------------------ chains (graph, nodes, sequences)

    @_guarded
    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or _serialized_name(serialized) or "chain"
        self._open_run(run_id, parent_run_id, metadata, name, inputs=inputs, tags=tags)

    @_guarded
    def on_chain_end(self, outputs: Any, *, run_id: Any, **kwargs: Any) -> None:
        rid = str(run_id)
        with self._lock:
            run = self._runs.get(rid)
            root = self._roots.get(run.root) if run is not None else None
            if root is not None and rid in root.task_runs:
                task = root.tasks.get(root.task_runs[rid])
                if task is not None:
                    task.outputs = self._state_pieces(outputs)
        run, is_root = self._close_run(run_id)
        if is_root and run is not None:
            if isinstance(outputs, Mapping) and outputs.get("__interrupt__"):  # paused for a human (interrupt())
                self.recorder.annotate_trace(run.root, {"interrupted": True})
            self._end_root(run.root)

    @_guarded
    def on_chain_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        if is_root:
            self._end_root(run.root, error)
        elif _is_interrupt(error):  # a node paused the graph for a human (interrupt()); the root ends normally
            self.recorder.annotate_trace(run.root, {"interrupted": True})

    # ------------------------------------------------------------ LLM calls

    def _start_llm(
        self,
        serialized: Any,
        message_lists: Sequence[Sequence[Any]] | None,
        prompts: Sequence[str] | None,
        run_id: Any,
        parent_run_id: Any,
        tags: Any,
        metadata: Any,
        kwargs: Mapping[str, Any],
    ) -> None:
        md = metadata or {}
        name = kwargs.get("name") or _serialized_name(serialized) or "llm"
        run = self._open_run(run_id, parent_run_id, md, name, tags=tags)
        serial_kwargs = serialized.get("kwargs") if isinstance(serialized, Mapping) else None
        run.model = _model_name(kwargs.get("invocation_params"), serial_kwargs) or _md_str(md, "ls_model_name")
        run.provider = _md_str(md, "ls_provider")
        override_q = md.get(QUESTION_OVERRIDE_KEY)
        question = override_q if isinstance(override_q, str) and override_q.strip() else None
        override_ctx = pieces_from_value(md.get(CONTEXT_OVERRIDE_KEY), "override")
        with self._lock:
            ancestors = {rid for rid, _ in self._chain(run.parent)}
            collected = self._collected_context(self._roots.get(run.root), run.ns, ancestors)
        calls: list[tuple[PromptReading, list[ContextPiece]]] = []
        if message_lists is not None:
            for messages in message_lists:
                messages = list(messages or ())
                found = merge_pieces(override_ctx, tool_message_pieces(messages), collected)
                calls.append((read_messages(messages), found))
        else:
            for prompt in prompts or ():
                text = prompt if isinstance(prompt, str) else str(prompt)
                calls.append((read_prompt(text), merge_pieces(override_ctx, collected)))
        bare_words = 0  # the longest prompt among this run's calls left without any context
        for reading, found in calls:
            context = found or list(reading.pieces)  # the prompt's own text only when nothing else was found
            run.questions.append(question or reading.question)
            run.contexts.append(context)
            if not context:
                bare_words = max(bare_words, reading.words)
        if bare_words >= LONG_PROMPT_WORDS:
            self._warn_no_context(run, bare_words)
        for key in ("langgraph_step", "langgraph_node"):
            if key in md:
                run.metadata[key] = md[key]

    def _warn_no_context(self, run: _Run, words: int) -> None:
        """One warning per node: its long prompt is scored with DGI, and how to name its context."""
        with self._lock:
            if run.node in self._warned_nodes:
                return
            self._warned_nodes.add(run.node)
            root = self._roots.get(run.root)
            task = root.tasks.get(run.ns) if root is not None and run.ns else None
            hints = (task.long_keys if task is not None else ()) or (root.root_long_keys if root is not None else ())
        keys = self.context_keys + (hints or ("<your key>",))
        self.log.warning(
            "groundlens: node %r is scored without context (DGI, a weak signal) although its prompt carried %d words: "
            "no retriever, tool, state or prompt context was found.%s Name the state key that holds its source text: "
            "%s(context_keys=%r), or pass the text per call: config={'metadata': {'%s': ...}}. (Said once per node.)",
            run.node,
            words,
            f" State keys with long text it received: {', '.join(hints)}." if hints else "",
            type(self).__name__,
            keys,
            CONTEXT_OVERRIDE_KEY,
        )

    @_guarded
    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        self._start_llm(serialized, messages, None, run_id, parent_run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_start(
        self,
        serialized: Any,
        prompts: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        self._start_llm(serialized, None, prompts, run_id, parent_run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_end(self, response: Any, *, run_id: Any, **kwargs: Any) -> None:
        ended = time.time()
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        rid = str(run_id)
        llm_output = getattr(response, "llm_output", None)
        generations = getattr(response, "generations", None) or []
        for i, gens in enumerate(generations):
            question = run.questions[i] if i < len(run.questions) else (run.questions[0] if run.questions else None)
            context = run.contexts[i] if i < len(run.contexts) else (run.contexts[0] if run.contexts else [])
            for j, gen in enumerate(gens or ()):
                message = getattr(gen, "message", None)
                text = (message_text(message) if message is not None else getattr(gen, "text", "")) or ""
                tool_calls = [c for c in (getattr(message, "tool_calls", None) or []) if isinstance(c, Mapping)]
                kind = "tool_call" if tool_calls and not text.strip() else "llm"
                resp_md = getattr(message, "response_metadata", None)
                model = run.model or _model_name(llm_output, resp_md)
                meta = dict(run.metadata)
                if tool_calls:
                    meta["tool_calls"] = [
                        {"name": c.get("name"), "id": c.get("id"), "args": short(c.get("args"), 300)}
                        for c in tool_calls
                    ]
                if len(generations) > 1 or len(gens) > 1:
                    meta["generation"] = [i, j]
                step_id = rid if (i, j) == (0, 0) else f"{rid}:{i}.{j}"
                if tool_calls:  # so the tool steps can point at the turn that asked for them
                    with self._lock:
                        root = self._roots.get(run.root)
                        if root is not None:
                            for c in tool_calls:
                                if c.get("id"):
                                    root.tool_call_steps[str(c["id"])] = step_id
                self.recorder.record(
                    CallRecord(
                        trace_key=run.root,
                        node=run.node,
                        kind=kind,
                        question=question,
                        context=tuple(context),
                        response=text if text.strip() else None,
                        model=model,
                        provider=run.provider,
                        usage=_usage(message, llm_output),
                        started_at=run.started_at,
                        ended_at=ended,
                        step_id=step_id,
                        metadata=meta,
                    )
                )
        if is_root:
            self._end_root(run.root)

    @_guarded
    def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        ended = time.time()
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        self.recorder.record(
            CallRecord(
                trace_key=run.root,
                node=run.node,
                kind="llm",
                question=run.questions[0] if run.questions else None,
                context=tuple(run.contexts[0]) if run.contexts else (),
                model=run.model,
                provider=run.provider,
                started_at=run.started_at,
                ended_at=ended,
                step_id=str(run_id),
                error=f"{type(error).__name__}: {error}",
                metadata=dict(run.metadata),
            )
        )
        if is_root:
            self._end_root(run.root, error)

    # ------------------------------------------------------------ tools

    @_guarded
    def on_tool_start(
        self,
        serialized: Any,
        input_str: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or _serialized_name(serialized) or "tool"
        run = self._open_run(run_id, parent_run_id, metadata, name, tags=tags)
        run.name = name
        run.input_text = input_str if isinstance(input_str, str) else short(input_str, 2000)
        call_id = kwargs.get("tool_call_id")
        run.tool_call_id = str(call_id) if call_id else None

    def _tool_record(self, run: _Run, run_id: Any, **fields: Any) -> CallRecord:
        with self._lock:
            root = self._roots.get(run.root)
            parent = root.tool_call_steps.get(run.tool_call_id) if root is not None and run.tool_call_id else None
        meta = {META_TOOL: run.name}
        if run.tool_call_id:
            meta["tool_call_id"] = run.tool_call_id
        return CallRecord(
            trace_key=run.root,
            node=run.node,
            kind="tool",
            question=run.input_text,
            started_at=run.started_at,
            ended_at=time.time(),
            step_id=str(run_id),
            parent_id=parent,
            metadata=meta,
            **fields,
        )

    @_guarded
    def on_tool_end(self, output: Any, *, run_id: Any, **kwargs: Any) -> None:
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        self.recorder.record(self._tool_record(run, run_id, response=_tool_output_text(output)))
        if is_root:
            self._end_root(run.root)

    @_guarded
    def on_tool_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        self.recorder.record(self._tool_record(run, run_id, error=f"{type(error).__name__}: {error}"))
        if is_root:
            self._end_root(run.root, error)

    # ------------------------------------------------------------ retrievers

    @_guarded
    def on_retriever_start(
        self,
        serialized: Any,
        query: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or _serialized_name(serialized) or "retriever"
        run = self._open_run(run_id, parent_run_id, metadata, name, tags=tags)
        run.name = name
        run.input_text = query if isinstance(query, str) else short(query, 2000)

    @_guarded
    def on_retriever_end(self, documents: Any, *, run_id: Any, **kwargs: Any) -> None:
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        pieces = pieces_from_value(list(documents or ()), "retriever")
        with self._lock:
            root = self._roots.get(run.root)
            if root is not None:
                chain = self._chain(run.parent)
                root.retrieved.extend((run.ns, chain, p) for p in pieces)
        self.recorder.record(
            CallRecord(
                trace_key=run.root,
                node=run.node,
                kind="retrieval",
                question=run.input_text,
                context=tuple(pieces),
                started_at=run.started_at,
                ended_at=time.time(),
                step_id=str(run_id),
                metadata={"retriever": run.name, "documents": len(pieces)},
            )
        )
        if is_root:
            self._end_root(run.root)

    @_guarded
    def on_retriever_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        run, is_root = self._close_run(run_id)
        if run is None:
            return
        self.recorder.record(
            CallRecord(
                trace_key=run.root,
                node=run.node,
                kind="retrieval",
                question=run.input_text,
                started_at=run.started_at,
                ended_at=time.time(),
                step_id=str(run_id),
                error=f"{type(error).__name__}: {error}",
                metadata={"retriever": run.name},
            )
        )
        if is_root:
            self._end_root(run.root, error)
