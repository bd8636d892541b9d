"""AutoGen AgentChat: the checker that reads a finished or streaming run; one trace per check."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, Sequence

from groundlens_core.errors import describe_exception
from groundlens_core.plugins.autogen.reading import (
    DEFAULT_QUESTION_SOURCES,
    _agentchat,
    _AutoGenShell,
    _Conversation,
    _messages_of,
)
from groundlens_core.plugins.kit.shell import ShellOptions, handle_internal_errors, names_shell_options
from groundlens_core.trace.model import Trace, new_id
from groundlens_core.trace.recorder import CallRecord

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only


class GroundlensChecker(_AutoGenShell):
    """Scores the answers in a finished (or streaming) AgentChat run; one trace per check."""

    @names_shell_options
    def __init__(
        self,
        *,
        question_sources: Sequence[str] | None = DEFAULT_QUESTION_SOURCES,
        agent_messages_as_context: bool = True,
        **options: Unpack[ShellOptions],
    ):
        _agentchat()
        super().__init__(
            question_sources=question_sources,
            agent_messages_as_context=agent_messages_as_context,
            **options,
        )

    def _observe(self, conv: _Conversation, key: str, msg: Any, *, block: bool = False) -> None:
        """Record what ``msg`` adds to the run. ``block``: a finished run, whose calls wait for room in
        the scoring queue instead of being recorded as overload (a stream being followed never waits:
        the team runs on the same event loop)."""
        records: list[CallRecord] = []
        with handle_internal_errors(
            self, f"reading a {type(msg).__name__}", trace_key=key, node=str(getattr(msg, "source", "agent"))
        ):
            records = conv.feed(msg, key)
        for r in records:
            self.recorder.record(r, block=block)

    def check_messages(
        self, messages: Iterable[Any], *, name: str | None = None, stop_reason: str | None = None
    ) -> Trace:
        """Record and score a run's messages; returns the trace once scored. Nothing runs any more, so
        the messages are handed to the recorder as fast as it scores them: none is left unscored for
        the load (``overload``), whatever the run's length and the queue's bounds."""
        key = new_id()
        meta = {"stop_reason": stop_reason} if stop_reason is not None else None
        self.recorder.start_trace(key, name=name or self.name, metadata=meta)
        conv = self._conversation()
        for msg in messages:
            self._observe(conv, key, msg, block=True)
        self.recorder.end_trace(key)
        return self.recorder.get_trace(key)  # type: ignore[return-value]

    def check(self, task_result: Any, *, name: str | None = None) -> Trace:
        """Record and score a ``TaskResult`` (from ``team.run`` / ``agent.run``)."""
        return self.check_messages(
            _messages_of(task_result), name=name, stop_reason=getattr(task_result, "stop_reason", None)
        )

    def check_stream(self, stream: Any, *, name: str | None = None) -> CheckedStream:
        """Follow a ``run_stream``: ``async for`` yields every item through, ``await`` returns the trace."""
        return CheckedStream(self, stream, name)


class CheckedStream:
    """A ``run_stream`` passed through a checker. Iterate it once, or await it."""

    def __init__(self, checker: GroundlensChecker, stream: Any, name: str | None):
        self._checker = checker
        self._stream = stream
        self._name = name
        self.key: str | None = None
        self.task_result: Any = None

    async def __aiter__(self) -> AsyncIterator[Any]:
        checker, recorder = self._checker, self._checker.recorder
        self.key = key = new_id()
        recorder.start_trace(key, name=self._name or checker.name)
        conv = checker._conversation()
        error: str | None = None
        try:
            async for item in self._stream:
                with handle_internal_errors(checker, "observing a stream item", trace_key=key):
                    if hasattr(item, "stop_reason") and hasattr(item, "messages"):  # the final TaskResult
                        self.task_result = item
                        recorder.annotate_trace(key, {"stop_reason": item.stop_reason})
                    elif hasattr(item, "chat_message") and hasattr(item, "inner_messages"):  # an agent's Response
                        checker._observe(conv, key, item.chat_message)
                    else:
                        checker._observe(conv, key, item)
                yield item
        except Exception as exc:
            error = describe_exception(exc)
            raise
        finally:
            recorder.end_trace(key, error=error)

    async def _consume(self) -> Trace | None:
        async for _ in self:
            pass
        return await asyncio.to_thread(self._checker.recorder.get_trace, self.key)

    def __await__(self):
        return self._consume().__await__()

    @property
    def trace(self) -> Trace | None:
        """The trace so far (after pending scores are done)."""
        return None if self.key is None else self._checker.recorder.get_trace(self.key)
