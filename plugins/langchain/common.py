"""The LangChain callback translation shared by the LangGraph and LangChain plugins: every root run
is one trace, an LLM call is read at its start and recorded at its end, tool and retriever runs are
steps whose outputs become context (docs/context.md). No exception leaves a callback method.

Each callback method, on the agent's thread, only keeps what could change after it returns (the
time, the application's span, a copy of the messages and of the state's context keys) and queues
the raw event; the translation into steps (the run tree, the trace, what context each call can
see) runs later, in order, on the recorder's worker or wherever a trace is read (the recorder
drains the queue first). The agent's thread pays for an append, not for the bookkeeping."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from groundlens_core.errors import describe_exception
from groundlens_core.internal_errors import internal_error
from groundlens_core.plugins.kit.revise import REVISION_KEY, revision_mark
from groundlens_core.plugins.kit.shell import (
    AdapterShell,
    ShellOptionsBesideName,
    names_shell_options,
    optional_base,
    report_internal_error,
    require,
)
from groundlens_core.plugins.langchain.instrumentor_spans import llm_span
from groundlens_core.plugins.langchain.prompt import PromptRead
from groundlens_core.plugins.langchain.runs import (
    Root,
    Run,
    Task,
    collected_context,
    documents_now,
    hint_keys,
    is_interrupt,
    md_str,
    model_name,
    node_path,
    run_key,
    serialized_name,
    state_values,
    tool_output_text,
    usage_of,
)
from groundlens_core.trace.model import META_INTERNAL_ERROR, META_OTEL_PARENT, META_ROOT_RUN_ID, META_TOOL
from groundlens_core.trace.recorder import CallRecord, app_span
from groundlens_core.trace.recorder.app_span import ABSENT, SpanRef
from groundlens_core.trace.recorder.inputs import context_from, message_text, short

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only

# the base class only; nothing else from LangChain is needed at import time
_HandlerBase: Any = optional_base("langchain_core.callbacks", "BaseCallbackHandler")

#: config metadata keys a user can set to give a call's context / question explicitly
CONTEXT_OVERRIDE_KEY = "groundlens_context"
QUESTION_OVERRIDE_KEY = "groundlens_question"
DEFAULT_CONTEXT_KEYS: tuple[str, ...] = ("context", "documents", "docs")
#: the input keys a question and the output keys a response are looked for under, in this order
QUESTION_KEYS: tuple[str, ...] = ("question", "input", "query", "prompt", "user_input", "messages")
RESPONSE_KEYS: tuple[str, ...] = ("answer", "output", "response", "content", "result", "generation", "text", "messages")

_MAX_OPEN_ROOTS = 1000  # roots whose end never came (abandoned streams) are dropped past this


def _error_target(self: GroundlensCallbackBase, run_id: Any) -> tuple[str | None, str | None]:
    """(trace key, node) of the run a failing callback was about: its root's trace and its node
    (the events queued before it translated first, so the run is known)."""
    rid = run_key(run_id) if run_id is not None else None
    self.recorder.drain_raw()  # nothing while a drain runs: the failure is inside it
    with self._lock:
        run = self._runs.get(rid) if rid else None
    return (run.root, run.node) if run is not None else (rid, None)


def _run_started(callback: str, default: str) -> Callable[..., None]:
    """The LangChain callback ``callback`` for the start of a tool or retriever run (``default``: its
    name when the run has none): it queues what the run was given, its step's question
    (:meth:`GroundlensCallbackBase._queue_io_start`). Nothing reaches LangChain: a failure becomes
    an error step of the run."""

    def handler(
        self: GroundlensCallbackBase,
        serialized: Any,
        given: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        **kwargs: Any,
    ) -> None:
        try:
            self._queue_io_start(callback, default, run_id, parent_run_id, serialized, given, kwargs)
        except Exception as exc:
            self._callback_failed(callback, exc, run_id)

    handler.__name__ = callback
    handler.__qualname__ = f"GroundlensCallbackBase.{callback}"
    return handler


def _run_ended(callback: str, translate: str, read: Callable[[Any], Any] | None = None) -> Callable[..., None]:
    """The LangChain callback ``callback`` for the end or failure of a run: it queues what it is given
    for the method named ``translate`` (:meth:`GroundlensCallbackBase._queue_ended`), after ``read``
    takes what must be read on the agent's thread (a retriever's documents, before they change).
    Nothing reaches LangChain: a failure becomes an error step of the run."""

    def handler(self: GroundlensCallbackBase, value: Any, *, run_id: Any, **kwargs: Any) -> None:
        try:
            self._queue_ended(callback, getattr(self, translate), run_id, value if read is None else read(value))
        except Exception as exc:
            self._callback_failed(callback, exc, run_id)

    handler.__name__ = callback
    handler.__qualname__ = f"GroundlensCallbackBase.{callback}"
    return handler


class GroundlensCallbackBase(AdapterShell, _HandlerBase):
    """Records every LLM call of a LangChain / LangGraph run as a trace step, scored off-thread.
    One instance serves any number of concurrent invocations; each root run is its own trace."""

    framework = "langchain"
    extra = "langchain"

    # our methods are cheap and thread-safe: run them in line (in order, no executor hop) in async runs
    run_inline = True
    raise_error = False

    @names_shell_options
    def __init__(
        self,
        name: str | None = None,
        *,
        context_keys: Sequence[str] = DEFAULT_CONTEXT_KEYS,
        **options: Unpack[ShellOptionsBesideName],
    ):
        if _HandlerBase is object:
            require("langchain_core.callbacks", self.extra, "langchain-core")
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._roots: dict[str, Root] = {}
        self.context_keys = tuple(context_keys)
        # nodes already warned about long prompts scored without context (setdefault: atomic, no lock
        # taken on the worker, which reads the prompts)
        self._warned_nodes: dict[str, object] = {}
        super().__init__(name=name, **options)

    # ------------------------------------------------------------ the queue of raw events

    def _queue(self, callback: str, at: float, translate: Callable[..., Any], *args: Any) -> None:
        """Queue ``translate(*args)``, the translation of ``callback``'s event (made at ``at``), on the
        recorder (:meth:`~groundlens_core.trace.recorder.Recorder.defer`)."""
        self.recorder.defer(self._translate, callback, at, translate, args)

    def _translate(self, callback: str, at: float, translate: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """One queued event's translation (``args[0]`` is its run id); a failure is reported as
        its callback's, at the callback's time."""
        try:
            translate(*args)
        except Exception as exc:
            self._callback_failed(callback, exc, args[0] if args else None, at)

    def _open_run(
        self,
        run_id: Any,
        parent_run_id: Any,
        metadata: Mapping[str, Any] | None,
        name: str,
        at: float,
        inputs: Any = None,
        pieces: Sequence[Any] = (),
        tags: Any = None,
        span: SpanRef | None = None,
    ) -> Run:
        """Register a run under its root (opening a new trace for a root run, started in the
        application's ``span``) and its LangGraph task (``pieces``: the context keys of its
        ``inputs``, as the callback saw them)."""
        rid = run_key(run_id)
        parent_rid = run_key(parent_run_id) if parent_run_id is not None else None
        md = metadata or {}
        ns = md.get("langgraph_checkpoint_ns")
        ns = ns if isinstance(ns, str) else ""
        new_root: Root | None = None
        with self._lock:
            parent = self._runs.get(parent_rid) if parent_rid is not None else None
            if parent is None:
                new_root = Root()
                self._roots[rid] = new_root
                if len(self._roots) > _MAX_OPEN_ROOTS:
                    abandoned = next(iter(self._roots))
                    self._drop_root(abandoned)
                    self.recorder.end_trace(
                        abandoned, error="abandoned: the run never ended (too many open runs)", at=at
                    )
                root_key = rid
            else:
                root_key = parent.root
            root = self._roots.get(root_key)
            if root is not None:
                root.run_ids.append(rid)
                if ns and ns not in root.tasks:  # the first run of a task is the node's own run
                    step = md.get("langgraph_step")
                    task = Task(ns=ns, step=step if isinstance(step, int) else None, start_seq=root.tick(), run_id=rid)
                    task.inputs = list(pieces)
                    task.state = inputs
                    root.tasks[ns] = task
                    root.task_runs[rid] = ns
                elif new_root is not None and inputs is not None:
                    root.root_pieces = list(pieces)
                    root.root_input = inputs
            run = Run(
                root=root_key,
                ns=ns,
                node=node_path(ns, md) or name or "run",
                started_at=at,
                name=name,
                parent=parent_rid,
                parent_step=root.parent_of(rid, ns, parent_rid) if root is not None and parent is not None else None,
            )
            self._runs[rid] = run
        if new_root is not None:
            meta: dict[str, Any] = {META_ROOT_RUN_ID: rid, "root_run_name": name}
            for key in ("thread_id", "langgraph_thread_id"):
                if md.get(key) is not None:
                    meta["thread_id"] = str(md[key])
            if tags:
                meta["tags"] = [str(t) for t in tags][:20]
            # the application's span the run started in, as the agent's thread saw it (none: none)
            meta[META_OTEL_PARENT] = span.to_dict() if span is not None else ABSENT
            self.recorder.start_trace(rid, name=self.name or name or self.framework, metadata=meta, at=at)
        return run

    def _drop_root(self, key: str) -> None:
        root = self._roots.pop(key, None)
        if root is not None:
            for rid in root.run_ids:
                self._runs.pop(rid, None)

    def _finish(
        self,
        run_id: Any,
        at: float,
        records: Any = None,
        error: BaseException | None = None,
        pieces: Sequence[Any] = (),
    ) -> Run | None:
        """Close a run: a LangGraph task's own run ends its task, keeping the context keys it wrote
        to the state (``pieces``); record the steps ``records(run)`` gives, and end the trace when
        it was the root."""
        rid = run_key(run_id)
        with self._lock:
            run = self._runs.get(rid)
            if run is None:
                return None
            root = self._roots.get(run.root)
            if run.root == rid:
                self._drop_root(rid)
            elif root is not None and rid in root.task_runs:
                task = root.tasks[root.task_runs.pop(rid)]
                task.end_seq = root.tick()
                task.outputs = list(pieces)
                task.state = None  # its calls kept what they need of it: the state is not held to the root's end
        for record in records(run) if records is not None else ():
            self.recorder.record(record)
        if run.root == rid:
            self._end_root(rid, error, at)
        return run

    def _step(self, run: Run, run_id: Any, kind: str, at: float, span: SpanRef | None, **fields: Any) -> CallRecord:
        """The call record of a step made by ``run``: its trace, node, timing, id and parent (``at``:
        when it ended; ``span``: the application's span then)."""
        fields.setdefault("ended_at", at)
        fields.setdefault("otel_parent", span if span is not None else ABSENT)  # none on the agent's thread
        fields.setdefault("step_id", run_key(run_id))
        fields.setdefault("parent_id", run.parent_step)
        return CallRecord(trace_key=run.root, node=run.node, kind=kind, started_at=run.started_at, **fields)

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

    def _end_root(self, key: str, error: BaseException | None, at: float) -> None:
        if error is not None and is_interrupt(error):  # human-in-the-loop pause, not a failure
            self.recorder.annotate_trace(key, {"interrupted": True})
            error = None
        elif isinstance(error, GeneratorExit):  # the caller stopped consuming a stream early
            self.recorder.annotate_trace(key, {"stopped_early": True})
            error = None
        self.recorder.end_trace(key, error=None if error is None else describe_exception(error), at=at)

    # ------------------------------------------------------------ the callbacks (the agent's thread)
    # (each catches its own failures in line: a decorator's extra call and keyword repacking cost
    # the agent's thread more than the callback itself)

    def _callback_failed(self, where: str, exc: Exception, run_id: Any, at: float | None = None) -> None:
        """A callback's own failure, reported as the error guard reports any: logged once and an
        ``error`` step of its run's trace (raised under ``GROUNDLENS_RAISE_INTERNAL_ERRORS``)."""
        try:
            target = _error_target(self, run_id)
        except Exception:
            target = (None, None)
        report_internal_error(self, self.framework, where, exc, target, None, at=at)

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any
    ) -> None:
        try:
            at = time.time()
            self._queue(
                "on_chain_start",
                at,
                self._chain_started,
                run_id,
                parent_run_id,
                serialized,
                inputs,
                state_values(self.context_keys, inputs),
                _kept(kwargs),
                at,
                app_span.capture(),
            )
        except Exception as exc:  # nothing reaches LangChain: an error step of the run instead
            self._callback_failed("on_chain_start", exc, run_id)

    def on_chain_end(self, outputs: Any, *, run_id: Any, **kwargs: Any) -> None:
        try:
            at = time.time()
            interrupted = (type(outputs) is dict or isinstance(outputs, Mapping)) and bool(outputs.get("__interrupt__"))
            pieces = state_values(self.context_keys, outputs)
            self._queue("on_chain_end", at, self._chain_ended, run_id, pieces, interrupted, at)
        except Exception as exc:  # nothing reaches LangChain: an error step of the run instead
            self._callback_failed("on_chain_end", exc, run_id)

    def on_chain_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        try:
            at = time.time()
            self._queue("on_chain_error", at, self._chain_failed, run_id, error, at)
        except Exception as exc:  # nothing reaches LangChain: an error step of the run instead
            self._callback_failed("on_chain_error", exc, run_id)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any
    ) -> None:
        try:
            at = time.time()
            message_lists = [list(m or ()) for m in messages] if messages is not None else None
            self._queue_llm_start(
                "on_chat_model_start", at, serialized, message_lists, None, run_id, parent_run_id, kwargs
            )
        except Exception as exc:  # nothing reaches LangChain: an error step of the run instead
            self._callback_failed("on_chat_model_start", exc, run_id)

    def on_llm_start(
        self, serialized: Any, prompts: Any, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any
    ) -> None:
        try:
            at = time.time()
            texts = [prompt if isinstance(prompt, str) else str(prompt) for prompt in prompts or ()]
            self._queue_llm_start("on_llm_start", at, serialized, None, texts, run_id, parent_run_id, kwargs)
        except Exception as exc:  # nothing reaches LangChain: an error step of the run instead
            self._callback_failed("on_llm_start", exc, run_id)

    def _queue_llm_start(
        self,
        callback: str,
        at: float,
        serialized: Any,
        message_lists: list[list[Any]] | None,
        prompts: list[str] | None,
        run_id: Any,
        parent_run_id: Any,
        kwargs: dict[str, Any],
    ) -> None:
        self._queue(
            callback,
            at,
            self._llm_started,
            run_id,
            parent_run_id,
            serialized,
            message_lists,
            prompts,
            _kept(kwargs),
            at,
            llm_span(run_id),  # an instrumentor that ran before us made it already
            app_span.capture(),  # the application's span, should this call be a root run
        )

    def on_llm_end(self, response: Any, *, run_id: Any, **kwargs: Any) -> None:
        try:
            at = time.time()
            self._queue(
                "on_llm_end",
                at,
                self._llm_ended,
                run_id,
                response,
                at,
                llm_span(run_id),  # an instrumentor that runs after us at the start: still open
                app_span.capture(),
            )
        except Exception as exc:  # nothing reaches LangChain: an error step of the run instead
            self._callback_failed("on_llm_end", exc, run_id)

    def _queue_io_start(
        self,
        callback: str,
        default: str,
        run_id: Any,
        parent_run_id: Any,
        serialized: Any,
        given: Any,
        kwargs: dict[str, Any],
    ) -> None:
        """Queue the start of a tool or retriever run (what it was given is its step's question)."""
        at = time.time()
        app = app_span.capture()  # the application's span, should this run be a root
        kept = _kept(kwargs)
        self._queue(callback, at, self._io_started, run_id, parent_run_id, serialized, given, kept, at, app, default)

    def _queue_ended(self, callback: str, translate: Callable[..., Any], run_id: Any, value: Any) -> None:
        """Queue the end or failure of a run, ``translate(run_id, value, at, app)``: the time and the
        application's span are the callback's, read here on the agent's thread."""
        at = time.time()
        self.recorder.defer(self._translate, callback, at, translate, (run_id, value, at, app_span.capture()))

    # the start, end or failure of a tool or retriever run: one callback each (see _run_started, _run_ended)
    on_tool_start = _run_started("on_tool_start", "tool")
    on_retriever_start = _run_started("on_retriever_start", "retriever")
    on_llm_error = _run_ended("on_llm_error", "_llm_failed")
    on_tool_end = _run_ended("on_tool_end", "_tool_ended")
    on_tool_error = _run_ended("on_tool_error", "_tool_failed")
    on_retriever_end = _run_ended("on_retriever_end", "_retriever_ended", read=documents_now)
    on_retriever_error = _run_ended("on_retriever_error", "_retriever_failed")

    # ------------------------------------------------------------ their translation (drain)

    def _chain_started(
        self,
        run_id: Any,
        parent_run_id: Any,
        serialized: Any,
        inputs: Any,
        pieces: list[Any],
        kwargs: dict[str, Any],
        at: float,
        span: SpanRef | None,
    ) -> None:
        name = kwargs.get("name") or serialized_name(serialized) or "chain"
        md, tags = kwargs.get("metadata"), kwargs.get("tags")
        self._open_run(run_id, parent_run_id, md, name, at, inputs=inputs, pieces=pieces, tags=tags, span=span)

    def _chain_ended(self, run_id: Any, pieces: list[Any], interrupted: bool, at: float) -> None:
        rid = run_key(run_id)
        if interrupted and rid in self._roots:
            self.recorder.annotate_trace(rid, {"interrupted": True})  # paused for a human (interrupt())
        self._finish(run_id, at, pieces=pieces)

    def _chain_failed(self, run_id: Any, error: BaseException, at: float) -> None:
        run = self._finish(run_id, at, error=error)
        if run is not None and run.root != run_key(run_id) and is_interrupt(error):
            self.recorder.annotate_trace(run.root, {"interrupted": True})  # a node paused the graph (interrupt())

    def _llm_started(
        self,
        run_id: Any,
        parent_run_id: Any,
        serialized: Any,
        message_lists: list[list[Any]] | None,
        prompts: list[str] | None,
        kwargs: Mapping[str, Any],
        at: float,
        span: SpanRef | None,
        app: SpanRef | None,
    ) -> None:
        md, tags = kwargs.get("metadata") or {}, kwargs.get("tags")
        name = kwargs.get("name") or serialized_name(serialized) or "llm"
        run = self._open_run(run_id, parent_run_id, md, name, at, tags=tags, span=app)
        serial_kwargs = serialized.get("kwargs") if isinstance(serialized, Mapping) else None
        run.model = model_name(kwargs.get("invocation_params"), serial_kwargs) or md_str(md, "ls_model_name")
        run.provider = md_str(md, "ls_provider")
        run.otel_span = span
        override_q = md.get(QUESTION_OVERRIDE_KEY)
        with self._lock:
            ancestors = {rid for rid, _ in self._chain(run.parent)}
            root = self._roots.get(run.root)
            collected = collected_context(root, run.ns, ancestors)
            task = root.tasks.get(run.ns) if root is not None and run.ns else None
            states = (task.state if task is not None else None, root.root_input if root is not None else None)
        revision = revision_mark(md, message_lists[0] if message_lists else ())
        if revision is not None:  # a revision loop sent this node's last answer back (docs/revise.md)
            with self._lock:
                root = self._roots.get(run.root)
                run.revision_of = root.last_llm.get(run.node) if root is not None else None
            run.metadata[REVISION_KEY] = revision
        run.prompt = PromptRead(
            self,
            run.node,
            message_lists,
            prompts or [],
            override_q if isinstance(override_q, str) and override_q.strip() else None,
            md.get(CONTEXT_OVERRIDE_KEY),
            collected,
            functools.partial(hint_keys, self.context_keys, *states),
            root.tool_steps if root is not None else {},
        )
        for key in ("langgraph_step", "langgraph_node"):
            if key in md:
                run.metadata[key] = md[key]

    def _warn_no_context(self, node: str, hints: Callable[[], tuple[str, ...]], words: int) -> None:
        """One warning per node: its long prompt is scored with DGI, and how to name its context
        (``hints()`` reads the long state keys it received, only when the warning is given)."""
        token = object()
        if self._warned_nodes.setdefault(node, token) is not token:
            return
        named = hints()
        keys = self.context_keys + (named or ("<your key>",))
        self.log.warning(
            "groundlens: node %r is scored without context (DGI, a weak signal) although its prompt carried %d words: "
            "no retriever, tool, state or prompt context was found.%s Name the state key that holds its source text: "
            "%s(context_keys=%r), or pass the text per call: config={'metadata': {'%s': ...}}. (Said once per node.)",
            node,
            words,
            f" State keys with long text it received: {', '.join(named)}." if named else "",
            type(self).__name__,
            keys,
            CONTEXT_OVERRIDE_KEY,
        )

    def _llm_ended(self, run_id: Any, response: Any, at: float, span: SpanRef | None, app: SpanRef | None) -> None:
        with self._lock:
            run = self._runs.get(run_key(run_id))
        if run is not None and run.otel_span is None:
            run.otel_span = span
        self._finish(run_id, at, lambda run: self._generation_steps(run, run_key(run_id), response, at, app))

    def _generation_steps(
        self, run: Run, rid: str, response: Any, ended: float, app: SpanRef | None
    ) -> Iterable[CallRecord]:
        """One step per generation of an LLM run (the first keeps the run id as its step id)."""
        llm_output = getattr(response, "llm_output", None)
        generations = getattr(response, "generations", None) or []
        for i, gens in enumerate(generations):
            for j, gen in enumerate(gens or ()):
                message = getattr(gen, "message", None)
                text = (message_text(message) if message is not None else getattr(gen, "text", "")) or ""
                tool_calls = [c for c in (getattr(message, "tool_calls", None) or []) if isinstance(c, Mapping)]
                step_id = rid if (i, j) == (0, 0) else f"{rid}:{i}.{j}"
                meta = dict(run.metadata)
                if tool_calls:
                    meta["tool_calls"] = [
                        {"name": c.get("name"), "id": c.get("id"), "args": short(c.get("args"), 300)}
                        for c in tool_calls
                    ]
                    with self._lock:  # so the tool steps can point at the turn that asked for them
                        root = self._roots.get(run.root)
                        if root is not None:
                            root.tool_call_steps.update({str(c["id"]): step_id for c in tool_calls if c.get("id")})
                if len(generations) > 1 or len(gens) > 1:
                    meta["generation"] = [i, j]
                kind = "tool_call" if tool_calls and not text.strip() else "llm"
                if kind == "llm" and text.strip() and (i, j) == (0, 0):
                    with self._lock:
                        root = self._roots.get(run.root)
                        if root is not None:
                            root.last_llm[run.node] = step_id
                yield self._step(
                    run,
                    step_id,
                    kind,
                    ended,
                    app,
                    **self._read_prompt(run, i, meta),
                    response=text if text.strip() else None,
                    model=run.model or model_name(llm_output, getattr(message, "response_metadata", None)),
                    provider=run.provider,
                    usage=usage_of(message, llm_output),
                    metadata=meta,
                    revision_of=run.revision_of if (i, j) == (0, 0) else None,
                    otel_parent=run.otel_span or app or ABSENT,
                )

    def _llm_failed(self, run_id: Any, error: BaseException, at: float, app: SpanRef | None) -> None:
        self._fail(
            run_id,
            error,
            at,
            app,
            "llm",
            self._failed_llm_fields,
        )

    def _failed_llm_fields(self, run: Run) -> dict[str, Any]:
        """The fields of a failed model run's error step: what its prompt said, its model, its metadata."""
        meta = dict(run.metadata)
        fields = self._read_prompt(run, 0, meta, failed=True)
        return {**fields, "model": run.model, "provider": run.provider, "metadata": meta}

    def _read_prompt(self, run: Run, i: int, metadata: dict[str, Any], *, failed: bool = False) -> dict[str, Any]:
        """The question and context of prompt ``i`` of a model run, read now (in the run's
        translation, off the agent's thread), as call record fields: the record reaches the recorder
        with them. A reading that fails is an internal error (raised under the test suite's setting)
        and makes the step an error step (``metadata`` gets the mark), so the call is never lost; a
        failed call (``failed``) keeps its own error."""
        if run.prompt is None:
            return {}
        try:
            question, context = run.prompt.reading(i)
        except Exception as exc:
            internal_error(exc, "reading the prompt", self.log, deferred=True)
            if failed:
                return {}
            metadata[META_INTERNAL_ERROR] = True
            return {"error": f"groundlens could not read the prompt: {type(exc).__name__}: {exc}"}
        return {"question": question, "context": context}

    def _fail(
        self,
        run_id: Any,
        error: BaseException,
        at: float,
        app: SpanRef | None,
        kind: str,
        fields: Callable[[Run], dict[str, Any]],
    ) -> None:
        """Close a failed run: one ``error`` step of ``kind`` with ``fields(run)``; the root's trace ends failed."""
        text = describe_exception(error)
        self._finish(run_id, at, lambda run: [self._step(run, run_id, kind, at, app, error=text, **fields(run))], error)

    def _io_started(
        self,
        run_id: Any,
        parent_run_id: Any,
        serialized: Any,
        given: Any,
        kwargs: Mapping[str, Any],
        at: float,
        app: SpanRef | None,
        default: str,
    ) -> None:
        """Open a tool or retriever run (``default``: its name when the run has none), keeping what it
        was given (its step's question) and the tool call that asked for it, if any."""
        name = kwargs.get("name") or serialized_name(serialized) or default
        md, tags = kwargs.get("metadata"), kwargs.get("tags")
        run = self._open_run(run_id, parent_run_id, md, name, at, tags=tags, span=app)
        run.input_text = given if isinstance(given, str) else short(given, 2000)
        call_id = kwargs.get("tool_call_id")
        run.tool_call_id = str(call_id) if call_id else None

    def _tool_step(self, run: Run, run_id: Any, at: float, app: SpanRef | None, **fields: Any) -> list[CallRecord]:
        """A tool step; its parent is the model turn that asked for it when that turn is a step."""
        with self._lock:
            root = self._roots.get(run.root)
            asked_by = root.tool_call_steps.get(run.tool_call_id) if root is not None and run.tool_call_id else None
            if root is not None and run.tool_call_id:  # its ToolMessage, in a later prompt, names this step
                root.tool_steps[run.tool_call_id] = run_key(run_id)
        meta = {META_TOOL: run.name}
        if run.tool_call_id:
            meta["tool_call_id"] = run.tool_call_id
        return [
            self._step(
                run,
                run_id,
                "tool",
                at,
                app,
                question=run.input_text,
                parent_id=asked_by or run.parent_step,
                metadata=meta,
                **fields,
            )
        ]

    def _tool_ended(self, run_id: Any, output: Any, at: float, app: SpanRef | None) -> None:
        self._finish(run_id, at, lambda run: self._tool_step(run, run_id, at, app, response=tool_output_text(output)))

    def _tool_failed(self, run_id: Any, error: BaseException, at: float, app: SpanRef | None) -> None:
        text = describe_exception(error)
        self._finish(run_id, at, lambda run: self._tool_step(run, run_id, at, app, error=text), error)

    def _retrieval_step(
        self, run: Run, run_id: Any, documents: Any, at: float, app: SpanRef | None
    ) -> list[CallRecord]:
        pieces = context_from(list(documents or ()), source="retriever")
        with self._lock:
            root = self._roots.get(run.root)
            if root is not None:
                chain = self._chain(run.parent)
                # a later call's context names this step as the documents' producer
                mine = run_key(run_id)
                root.retrieved.extend((run.ns, chain, dataclasses.replace(p, producer=mine)) for p in pieces)
        meta = {"retriever": run.name, "documents": len(pieces)}
        return [
            self._step(run, run_id, "retrieval", at, app, question=run.input_text, context=tuple(pieces), metadata=meta)
        ]

    def _retriever_ended(self, run_id: Any, documents: Any, at: float, app: SpanRef | None) -> None:
        self._finish(run_id, at, lambda run: self._retrieval_step(run, run_id, documents, at, app))

    def _retriever_failed(self, run_id: Any, error: BaseException, at: float, app: SpanRef | None) -> None:
        self._fail(
            run_id,
            error,
            at,
            app,
            "retrieval",
            lambda run: {"question": run.input_text, "metadata": {"retriever": run.name}},
        )


def _kept(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A callback's keywords as the translation reads them later: its own dict (new per call), with
    a copy of the run's metadata, which LangChain's run manager keeps and could still change."""
    md = kwargs.get("metadata")
    if md:
        kwargs["metadata"] = dict(md)
    return kwargs
