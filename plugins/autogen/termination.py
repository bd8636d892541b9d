"""AutoGen: a ``TerminationCondition`` that scores each answer as the team produces it and stops on a flagged one."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from groundlens_core.plugins.autogen.reading import DEFAULT_QUESTION_SOURCES, EXTRA, _agentchat, _AutoGenShell
from groundlens_core.plugins.kit.shell import (
    ShellOptionsBesideName,
    handle_internal_errors,
    names_shell_options,
    require,
)
from groundlens_core.trace.model import new_id

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only


class _TerminationTranslation(_AutoGenShell):
    """What :class:`GroundlensFlaggedTermination` does; the AutoGen base classes are added on first
    access (see :func:`_build_termination`)."""

    @names_shell_options
    def __init__(
        self,
        *,
        stop_on: Sequence[str] = ("flagged",),
        sources: Sequence[str] | None = None,
        name: str | None = None,
        question_sources: Sequence[str] | None = DEFAULT_QUESTION_SOURCES,
        agent_messages_as_context: bool = True,
        **options: Unpack[ShellOptionsBesideName],
    ):
        bad = set(stop_on) - {"flagged", "review", "trusted"}
        if bad:
            raise ValueError(f"stop_on takes triage bands (flagged, review, trusted), got {sorted(bad)}")
        self.stop_on = tuple(stop_on)
        self.sources = None if sources is None else tuple(sources)
        super().__init__(
            question_sources=question_sources,
            agent_messages_as_context=agent_messages_as_context,
            name=name or "flagged-termination",
            **options,
        )
        self._conv = self._conversation()
        self._terminated = False
        self._key: str | None = None
        self.last_trigger: dict[str, Any] | None = None  # the step that stopped the team

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def __call__(self, messages_in: Sequence[Any]) -> Any:
        if self._terminated:
            raise require("autogen_agentchat.base", EXTRA, "AutoGen AgentChat").TerminatedException(
                "Termination condition has already been reached"
            )
        stop = None
        for msg in messages_in:
            async with handle_internal_errors(self, "termination check", trace_key=self._key):  # never break the team
                stop = await self._check(msg) or stop
        if stop is not None:
            self._terminated = True
        return stop

    async def _check(self, msg: Any) -> Any:
        if self._key is None:
            self._key = new_id()
            self.recorder.start_trace(self._key)
        stop = None
        for record in self._conv.feed(msg, self._key):
            inline = None
            if record.kind == "llm":
                inline = await self.ascore_inline(
                    question=record.question, response=record.response, context=record.context
                )
                record = dataclasses.replace(record, **inline.record_fields())
            step_id = self.recorder.record(record)
            result = None if inline is None else inline.result
            if (
                result is not None
                and stop is None
                and result.triage in self.stop_on
                and (self.sources is None or record.node in self.sources)
            ):
                self.last_trigger = {
                    "step_id": step_id,
                    "node": record.node,
                    "result": result.to_dict(),
                    "response": record.response,
                }
                stop = _agentchat().StopMessage(
                    content=(
                        f"groundlens {result.triage} the answer of {record.node} "
                        f"({result.method.upper()}={result.value:.2f}): {result.explanation}"
                    ),
                    source="GroundlensFlaggedTermination",
                )
        return stop

    async def reset(self) -> None:
        self._terminated = False
        self._conv = self._conversation()  # a new run, a new task
        if self._key is not None:
            self.recorder.end_trace(self._key)
            self._key = None


def _build_termination() -> type:
    base, core = (
        require("autogen_agentchat.base", EXTRA, "AutoGen AgentChat"),
        require("autogen_core", EXTRA, "AutoGen"),
    )
    from pydantic import BaseModel

    class GroundlensFlaggedTerminationConfig(BaseModel):
        stop_on: list[str] = ["flagged"]
        sources: list[str] | None = None
        question_sources: list[str] | None = list(DEFAULT_QUESTION_SOURCES)
        agent_messages_as_context: bool = True

    class GroundlensFlaggedTermination(
        _TerminationTranslation,
        base.TerminationCondition,  # type: ignore[name-defined]
        core.Component[GroundlensFlaggedTerminationConfig],  # type: ignore[name-defined]
    ):  # type: ignore[name-defined]
        """Stops a team as soon as an answer lands in a band of ``stop_on`` (default: flagged),
        scoring each answer off the event loop; ``sources`` limits which agents can stop it."""

        component_config_schema = GroundlensFlaggedTerminationConfig
        component_provider_override = "groundlens_core.plugins.autogen.GroundlensFlaggedTermination"

    return GroundlensFlaggedTermination
