"""The trace data model every plugin writes into and every exporter reads.

A :class:`Trace` is one root run of an agent (a graph invocation, a crew kickoff, a team run); a
:class:`Step` is one thing that happened in it: an LLM call (scored), a tool call turn, a tool or
retriever result (context for later steps). Both serialise to plain JSON that round-trips exactly;
``schema.json`` beside this file describes the format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import os
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping
from warnings import warn

from groundlens_core._version import __version__
from groundlens_core.errors import GroundlensInputError
from groundlens_core.renamed import renamed
from groundlens_core.scoring.bands import COUNT_ORDER, SCORED_METHODS, TRIAGE_ORDER, empty_counts, risk_key, step_band
from groundlens_core.scoring.results import GroundlensResult, as_score

#: 1.1 added ``cascade_from`` to steps, 1.2 ``revision_of``; older files read as steps without them.
#: 1.3 writes a step's result object under ``result`` (older files hold it under ``score``, and still load)
SCHEMA_VERSION = "1.3"
STEP_KINDS = ("llm", "tool_call", "tool", "retrieval", "agent")
STEP_METHODS = (*SCORED_METHODS, "skipped", "error")

# Metadata keys the exporters read. Adapters write them through these names, and
# tests/test_metadata_contract.py checks that every key an exporter reads is written by an adapter.
#: step metadata: the tool a ``tool`` step ran (the OTel span is ``execute_tool <tool>``)
META_TOOL = "tool"
#: trace metadata: True when the run is one agent, not a graph, crew or team (OTel root ``invoke_agent``)
META_SINGLE_AGENT = "single_agent"
#: step metadata: an ``error`` step standing for a failure inside groundlens, not in the agent
META_INTERNAL_ERROR = "internal_error"
#: trace metadata: the framework's id of the root run (LangChain's run id: LangSmith's trace id)
META_ROOT_RUN_ID = "root_run_id"
#: trace and step metadata, written by the recorder: the application's OpenTelemetry span the trace
#: started in / the call was made in (``groundlens_core.trace.recorder.app_span``)
META_OTEL_PARENT = "otel_parent"
#: trace metadata, written by the recorder: the calls its sampling left out (``sample_rate``, node
#: filters; ``groundlens_core.trace.recorder.sampling``): counted, never silently missing
META_UNSAMPLED = "unsampled"
#: step metadata, written by the recorder: the id the adapter gave a step whose id another step of
#: its trace had already (the step was given ``<id>-2``, ``<id>-3``, ...: one step per id)
META_ORIGINAL_STEP_ID = "original_step_id"

# A text field is either the text itself or, after redaction or cutting, a dict:
#   {"redacted": true, "hmac_sha256": "...", "length": N}  (text dropped)
#   {"text": "first N chars", "truncated": true, "length": N}  (text cut)
# ``hmac_sha256`` is keyed with a random key made once per process (see :func:`redaction_digest`);
# files written by older versions carry an unkeyed ``sha256`` instead and still load.
Text = Any

#: the key of :func:`redaction_digest`: random, never written anywhere, new in every process
_REDACTION_KEY = os.urandom(32)


def redaction_digest(text: str) -> str:
    """HMAC-SHA256 of ``text`` under this process's random key.

    Equal texts redacted by one process get equal digests (a report still shows which texts
    repeat), but nobody can confirm a guess of a short redacted text by hashing it, as an unkeyed
    SHA-256 would allow."""
    return hmac.new(_REDACTION_KEY, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def to_iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def plain_text(value: Text) -> str:
    """The readable text of a (possibly redacted or cut) text field."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if value.get("redacted"):
        if value.get("sha256"):  # a file from an older version
            return f"[redacted: {value.get('length', 0)} chars, sha256 {str(value.get('sha256'))[:12]}]"
        return f"[redacted: {value.get('length', 0)} chars, id {str(value.get('hmac_sha256', ''))[:12]}]"
    return str(value.get("text", ""))


@dataclass(frozen=True)
class ContextPiece:
    """One piece of context and where it came from: ``source`` is the kind of place (``tool:<name>``,
    ``retriever``, ``state:<key>``, ``argument:<name>``, ``override``), ``producer`` the id of the
    step of the same trace whose result or output the piece is (a tool or retriever step, an earlier
    LLM step), when the adapter knew it. Why an id and not a text match: a tool result quoted in
    other words, cut, or repeated by two steps is still traced to the step that made it."""

    text: Text
    source: str
    producer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"source": self.source, "text": self.text}
        if self.producer is not None:  # only when known: a file without producers reads as before
            out["producer"] = self.producer
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ContextPiece:
        if not isinstance(d, Mapping):
            raise GroundlensInputError(f"a context piece must be an object with source and text, got {_kind(d)}")
        return cls(
            text=_text(d, "text", "a context piece"),
            source=_string(d, "source", "a context piece") or "",
            producer=_string(d, "producer", "a context piece") or None,
        )


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Usage | None:
        if d is None:
            return None
        if not isinstance(d, Mapping):
            raise GroundlensInputError(f"usage must be an object of token counts, got {_kind(d)}")
        return cls(*(_count(d, k, "usage") for k in ("input_tokens", "output_tokens", "total_tokens")))


_ABSENT = object()


class _StepScore(float):
    """:attr:`Step.score`: the number. ``step.score`` used to be the result object, and code written
    then (the original groundlens README's ``step.score.value``) reads the result's fields from it:
    those reads still work, with a ``DeprecationWarning`` naming ``step.result``."""

    __slots__ = ("_result",)
    _result: Any

    def __new__(cls, value: float, result: Any) -> _StepScore:
        out = super().__new__(cls, value)
        out._result = result
        return out

    def __getattr__(self, name: str) -> Any:
        value = _ABSENT if name.startswith("__") or name == "_result" else getattr(self._result, name, _ABSENT)
        if value is _ABSENT:
            raise AttributeError(f"'float' object has no attribute {name!r}")
        warn(f"step.score is the number now: read step.result.{name}", DeprecationWarning, stacklevel=2)
        return value

    def __reduce__(self) -> Any:
        return float, (float(self),)  # a copy or pickle is the plain number


@dataclass(frozen=True)
class Step:
    """One thing that happened in a trace. ``result`` is the core's frozen result object
    (:class:`~groundlens_core.SGIResult` / :class:`~groundlens_core.DGIResult` /
    :class:`~groundlens_core.SupportResult`) when the step was scored, and :attr:`score` its number;
    its JSON form is the result's ``to_dict()``, read back by :func:`~groundlens_core.scoring.results.as_score`
    (a dict handed to the constructor is converted the same way)."""

    id: str
    index: int
    node: str
    kind: str  # one of STEP_KINDS
    method: str  # one of STEP_METHODS
    parent_id: str | None = None
    result: GroundlensResult | None = None  # when method is sgi/dgi/support
    triage: str | None = None  # trusted / review / flagged / error; None when skipped
    question: Text = None
    context: tuple[ContextPiece, ...] = ()
    response: Text = None
    model: str | None = None
    provider: str | None = None
    usage: Usage | None = None
    started_at: str | None = None  # the LLM call's start (UTC ISO 8601)
    ended_at: str | None = None
    llm_latency_ms: float | None = None  # the framework's call, as the adapter saw it
    scoring_latency_ms: float | None = None  # our scoring, off the agent's thread
    error: str | None = None
    skip_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: ids of earlier unverified steps of the trace (flagged, error, or grounded in one) whose output
    #: this step's context carries (see ``groundlens_core.trace.lineage``); a step whose support
    #: comes from one is at most ``review``
    cascade_from: tuple[str, ...] = ()
    #: the id of the earlier flagged step of the trace this step answers again, after a revision
    #: loop sent that answer back with its findings (docs/revise.md)
    revision_of: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cascade_from, tuple):
            object.__setattr__(self, "cascade_from", tuple(self.cascade_from))
        if self.result is not None and not isinstance(self.result, GroundlensResult):
            object.__setattr__(self, "result", as_score(self.result))

    # convenient views of the result
    @property
    def node_name(self) -> str:
        """The original groundlens name of :attr:`node`."""
        return self.node

    @property
    def value(self) -> float | None:
        return None if self.result is None else self.result.value

    @property
    def normalized(self) -> float | None:
        return None if self.result is None else self.result.normalized

    @property
    def flagged(self) -> bool:
        return self.triage == "flagged"

    @property
    def explanation(self) -> str | None:
        return None if self.result is None else self.result.explanation

    @property
    def band(self) -> str:
        """``flagged`` / ``review`` / ``trusted`` / ``error`` / ``skipped`` (see ``groundlens_core.scoring.bands``)."""
        return step_band(self.method, self.triage)

    @property
    def label(self) -> str:
        """``score=0.82 trusted, SGI=1.30``, ``score=0.45 review (no context), DGI=0.35``, ``skipped``,
        ``error``: what summaries print. The score is the value the step is ranked by."""
        if self.method in SCORED_METHODS and self.value is not None and self.score is not None:
            weak = " (no context)" if self.method == "dgi" else ""
            return f"score={self.score:.2f} {self.triage}{weak}, {self.method.upper()}={self.value:.2f}"
        return self.method

    @property
    def score(self) -> float | None:
        """The step's score (``result.score``), in [0, 1]: the value triage sorts by and every report
        shows (the band is a function of it); None when the step was not scored."""
        if self.result is None or self.method not in SCORED_METHODS:
            return None
        return _StepScore(self.result.score, self.result)

    rank = renamed("score", "Step.rank")

    @property
    def decision(self) -> Any:
        """Why the step has its band, as data (:class:`~groundlens_core.scoring.decision.Decision`), or None."""
        return None if self.result is None else self.result.decision

    def risk_key(self, *order: Any) -> tuple[Any, ...]:
        """:func:`groundlens_core.scoring.bands.risk_key` of this step, ties broken by ``order`` then its index."""
        return risk_key(self.band, self.score, *order, self.index)

    def view(self, *, redact: bool = False, max_text_chars: int | None = None) -> Step:
        """This step as every export shows it: with ``redact`` each text becomes a keyed digest
        (:func:`redaction_digest`) and its length and the error and metadata values are hidden;
        ``max_text_chars`` cuts long texts (recording their full length). JSON, HTML and
        OpenTelemetry all read this one view."""
        if not redact and max_text_chars is None:
            return self
        changes: dict[str, Any] = {
            "question": shrink_text(self.question, redact, max_text_chars),
            "response": shrink_text(self.response, redact, max_text_chars),
            "context": tuple(
                dataclasses.replace(c, text=shrink_text(c.text, redact, max_text_chars)) for c in self.context
            ),
        }
        if redact:
            changes["error"] = redact_string(self.error)
            changes["metadata"] = redact_mapping(self.metadata)
            if self.result is not None and getattr(self.result, "evidence", None) is not None:
                from groundlens_core.scoring.results import redact_score_dict

                # evidence quotes the response and context, and the explanation the weakest sentence
                changes["result"] = as_score(redact_score_dict(self.result.to_dict()))
        elif max_text_chars is not None and self.result is not None:
            # the result quotes the texts too: evidence sentences and passages, facts, the explanation
            cut = cut_score_texts(self.result.to_dict(), max_text_chars)
            if cut is not None:
                changes["result"] = as_score(cut)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "index": self.index,
            "parent_id": self.parent_id,
            "node": self.node,
            "kind": self.kind,
            "method": self.method,
            "result": None if self.result is None else self.result.to_dict(),
            "triage": self.triage,
            "question": self.question,
            "context": [c.to_dict() for c in self.context],
            "response": self.response,
            "model": self.model,
            "provider": self.provider,
            "usage": None if self.usage is None else self.usage.to_dict(),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "llm_latency_ms": self.llm_latency_ms,
            "scoring_latency_ms": self.scoring_latency_ms,
            "error": self.error,
            "skip_reason": self.skip_reason,
            "metadata": self.metadata,
            "cascade_from": list(self.cascade_from),
            "revision_of": self.revision_of,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        """A step from its JSON form; anything malformed is a one-line :class:`GroundlensInputError`
        naming the step and the field."""
        if not isinstance(d, Mapping):
            raise GroundlensInputError(f"a step must be a JSON object, got {_kind(d)}")
        index, sid = d.get("index"), d.get("id")
        where = f"step {index if _is_count(index) else sid if isinstance(sid, str) else '?'}"[:80]
        context = d.get("context") or ()
        if not isinstance(context, (list, tuple)):
            raise GroundlensInputError(f"{where}: context must be a list of pieces, got {_kind(context)}")
        cascade = d.get("cascade_from") or ()
        if not isinstance(cascade, (list, tuple)) or not all(isinstance(c, str) for c in cascade):
            raise GroundlensInputError(f"{where}: cascade_from must be a list of step ids, got {_kind(cascade)}")
        revision_of = d.get("revision_of")
        if revision_of is not None and not isinstance(revision_of, str):
            raise GroundlensInputError(f"{where}: revision_of must be a step id or null, got {_kind(revision_of)}")
        index = _required(d, "index", where)
        if not _is_count(index):
            raise GroundlensInputError(f"{where}: index must be a whole number of at least 0, got {_kind(index)}")
        try:
            pieces = tuple(ContextPiece.from_dict(c) for c in context)
            usage = Usage.from_dict(d.get("usage"))
            result = as_score(_result_of(d), checked=True)
        except (TypeError, ValueError) as exc:
            raise GroundlensInputError(f"{where}: {exc}") from None
        return cls(
            id=_name(d, "id", where),
            index=index,
            parent_id=_string(d, "parent_id", where),
            node=_name(d, "node", where),
            kind=_choice(d, "kind", STEP_KINDS, where),
            method=_choice(d, "method", STEP_METHODS, where),
            result=result,
            triage=_choice(d, "triage", (*TRIAGE_ORDER, "error", None), where, required=False),
            question=_text(d, "question", where),
            context=pieces,
            response=_text(d, "response", where),
            model=_string(d, "model", where),
            provider=_string(d, "provider", where),
            usage=usage,
            started_at=_string(d, "started_at", where),
            ended_at=_string(d, "ended_at", where),
            llm_latency_ms=_number(d, "llm_latency_ms", where),
            scoring_latency_ms=_number(d, "scoring_latency_ms", where),
            error=_string(d, "error", where),
            skip_reason=_string(d, "skip_reason", where),
            metadata=_mapping(d, "metadata", where),
            cascade_from=tuple(cascade),
            revision_of=revision_of,
        )


#: what :meth:`Trace.to_html` calls, ``(trace, path, **options) -> html``. The HTML report stands on
#: this module, so the trace package hands it in (``groundlens_core/trace/__init__.py``) rather than
#: the model importing it.
_html_report: Callable[..., str] | None = globals().get("_html_report")  # kept across a reload


def set_html_report(render: Callable[..., str]) -> None:
    """Set what :meth:`Trace.to_html` calls; the trace package sets its HTML report when imported."""
    global _html_report
    _html_report = render


@dataclass
class Trace:
    id: str
    name: str
    framework: str
    started_at: str
    ended_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    fingerprint: str | None = None  # embedder that scored the steps
    status: str = "ok"  # "ok" | "error" (the agent raised; steps so far are kept)
    error: str | None = None
    schema_version: str = SCHEMA_VERSION
    package_version: str = __version__
    #: the cascade index of the flagged steps so far (``groundlens_core.trace.lineage``), not exported
    _lineage: Any = field(default=None, init=False, repr=False, compare=False)

    # ------------------------------------------------------------ views

    def add_step(self, step: Step) -> Step:
        """Append ``step`` with its ``cascade_from`` set (see ``lineage``); returns the step appended.
        Its band is the one it was scored with: the core decided it with the upstream outputs its
        context carries (``lineage.upstream_of``), so appending never decides it a second time."""
        from groundlens_core.trace.lineage import link_step

        step = link_step(self, step)
        self.steps.append(step)
        return step

    def scored_steps(self) -> list[Step]:
        return [s for s in self.steps if s.method in SCORED_METHODS]

    def counts(self) -> dict[str, int]:
        """Steps per band: the three triage bands, ``error`` and ``skipped``."""
        out = empty_counts()
        for s in self.steps:
            out[s.band] += 1
        return out

    def unscored(self) -> dict[str, int]:
        """Steps left without a score because of the scoring load, not because of the step itself:
        ``overload`` (the recorder's backlog was full when the call came) and ``pending`` (not scored
        yet when ``get_trace(timeout=...)`` returned)."""
        out = {"overload": 0, "pending": 0}
        for s in self.steps:
            if s.method == "skipped" and s.skip_reason in out:
                out[s.skip_reason] += 1
        return out

    def riskiest(self, n: int | None = None, *, scored_only: bool = False) -> list[Step]:
        """Errors first, then flagged, review and trusted steps, lowest score first; a step whose
        context carries a flagged step's output (``cascade_from``) comes right after that step."""
        from groundlens_core.trace.lineage import cascade_order

        steps = self.scored_steps() if scored_only else [s for s in self.steps if s.method != "skipped"]
        ordered = cascade_order(sorted(steps, key=Step.risk_key))
        return ordered if n is None else ordered[:n]

    @property
    def unsampled(self) -> int:
        """Calls of this trace the recorder's sampling left out (``sample_rate``, ``nodes``,
        ``skip_nodes`` of the adapter): not steps, not scored, counted here."""
        value = self.metadata.get(META_UNSAMPLED, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    def summary(self, *, riskiest_first: bool = False, limit: int = 8) -> str:
        """``3 steps | 2 trusted, 1 flagged | retriever [SGI=1.30 trusted], answer [DGI=0.21 flagged]``."""
        counts = self.counts()
        parts = [f"{counts[k]} {k}" for k in COUNT_ORDER if counts.get(k)]
        shown = self.riskiest() if riskiest_first else [s for s in self.steps if s.method != "skipped"]
        items = [f"{s.node} [{s.label}]" for s in shown[:limit]]
        if len(shown) > limit:
            items.append(f"... {len(shown) - limit} more")
        head = f"{len(self.steps)} step{'s' if len(self.steps) != 1 else ''}"
        unscored = ", ".join(f"{n} not scored ({k})" for k, n in self.unscored().items() if n)
        if self.unsampled:
            unscored = ", ".join(x for x in (unscored, f"{self.unsampled} not sampled") if x)
        return " | ".join(x for x in (head, ", ".join(parts), unscored, self._cascade_clause(), ", ".join(items)) if x)

    def _cascade_clause(self) -> str:
        """``cascade: answer <- plan (flagged)``: the steps whose context carries an unverified step's output."""
        nodes = {s.id: f"{s.node} ({s.band})" for s in self.steps}
        links = [
            f"{s.node} <- {', '.join(nodes.get(o, o) for o in s.cascade_from)}" for s in self.steps if s.cascade_from
        ]
        return f"cascade: {'; '.join(links)}" if links else ""

    # ------------------------------------------------------------ JSON

    def view(self, *, redact: bool = False, max_text_chars: int | None = None) -> Trace:
        """This trace as the exports show it (see :meth:`Step.view`); the trace's own error and
        metadata are redacted too."""
        if not redact and max_text_chars is None:
            return self
        return dataclasses.replace(
            self,
            steps=[s.view(redact=redact, max_text_chars=max_text_chars) for s in self.steps],
            error=redact_string(self.error) if redact else self.error,
            metadata=redact_mapping(self.metadata) if redact else dict(self.metadata),
        )

    def to_html(self, path: Any = None, **kwargs: Any) -> str:
        """The HTML triage report of this trace (see :func:`groundlens_core.trace.html.render_html`);
        with ``path`` it is also written there. Returns the HTML."""
        if _html_report is None:  # only while the trace package is still being imported
            raise RuntimeError("the HTML report is not set yet: import groundlens_core.trace first")
        return _html_report(self, path, **kwargs)

    def to_dict(self, *, redact: bool = False, max_text_chars: int | None = None) -> dict[str, Any]:
        """Plain data of :meth:`view`: ``redact`` keeps a keyed digest and length instead of every text;
        ``max_text_chars`` cuts long texts, recording their full length."""
        if redact or max_text_chars is not None:
            return self.view(redact=redact, max_text_chars=max_text_chars).to_dict()
        steps = [s.to_dict() for s in self.steps]
        error, metadata = self.error, self.metadata
        return {
            "schema_version": SCHEMA_VERSION,  # written in the current format, whatever version was read
            "package_version": self.package_version,
            "id": self.id,
            "name": self.name,
            "framework": self.framework,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "status": self.status,
            "error": error,
            "fingerprint": self.fingerprint,
            "metadata": metadata,
            "steps": steps,
        }

    def to_json(self, *, indent: int | None = 2, redact: bool = False, max_text_chars: int | None = None) -> str:
        return json.dumps(
            self.to_dict(redact=redact, max_text_chars=max_text_chars),
            indent=indent,
            ensure_ascii=False,
            allow_nan=False,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trace:
        """A trace from its JSON form (see ``schema.json``); anything malformed is a one-line
        :class:`GroundlensInputError` (a ``ValueError``) naming the field."""
        if not isinstance(d, Mapping):
            raise GroundlensInputError(f"a trace must be a JSON object, got {_kind(d)}")
        steps = d.get("steps", ())
        if not isinstance(steps, (list, tuple)):
            raise GroundlensInputError(f"the trace's steps must be a list, got {_kind(steps)}")
        _check_schema_version(d.get("schema_version", SCHEMA_VERSION))
        where = "the trace"
        return cls(
            id=_name(d, "id", where),
            name=_name(d, "name", where),
            framework=_name(d, "framework", where),
            started_at=_name(d, "started_at", where),
            ended_at=_string(d, "ended_at", where),
            metadata=_mapping(d, "metadata", where),
            steps=[Step.from_dict(s) for s in steps],
            fingerprint=_string(d, "fingerprint", where),
            status=_choice(d, "status", ("ok", "error"), where, required=False) or "ok",
            error=_string(d, "error", where),
            schema_version=str(d.get("schema_version", SCHEMA_VERSION)),
            package_version=_string(d, "package_version", where) or __version__,
        )

    @classmethod
    def from_json(cls, text: str | bytes, *, name: str = "the trace") -> Trace:
        """A trace from its JSON text; anything malformed is a one-line :class:`GroundlensInputError`
        starting with ``name`` (``load`` gives the file's path)."""
        from groundlens_core.batch.json_input import loads

        data = loads(text, name=name)
        try:
            return cls.from_dict(data)
        except GroundlensInputError as exc:
            raise GroundlensInputError(f"{name} is not a groundlens trace: {exc}") from None

    def save(self, path, **kwargs) -> None:
        """Write the JSON atomically: a failure never leaves a half-written or emptied file behind."""
        atomic_write_text(path, self.to_json(**kwargs) + "\n")

    @classmethod
    def load(cls, path) -> Trace:
        from groundlens_core.batch.outputs import check_input_file

        return cls.from_json(check_input_file(path, what="trace file").read_bytes(), name=str(path))


def _check_schema_version(value: Any) -> None:
    """Refuse a trace written in a newer major schema than this version writes: its fields may mean
    something this version would misread. Older and newer minor versions read (new fields are optional)."""
    major = str(value).split(".")[0] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    if not major.isdigit():
        raise GroundlensInputError(
            f"the trace's schema_version must be like {SCHEMA_VERSION!r}, got {repr(value)[:40]}"
        )
    if int(major) > int(SCHEMA_VERSION.split(".")[0]):
        raise GroundlensInputError(
            f"the trace's schema_version {value} is newer than this version of groundlens reads "
            f"({SCHEMA_VERSION}); upgrade groundlens-core to read it"
        )


def _result_of(d: Mapping[str, Any]) -> Any:
    """A step's result object as its JSON holds it: under ``result``, or, in a file of schema 1.2 or
    older, under ``score`` (read, and refused when malformed, the same way)."""
    return d["result"] if "result" in d else d.get("score")


def _kind(value: Any) -> str:
    """How a JSON value reads in a message: ``a string``, ``a number``, ``null``."""
    names = {str: "a string", bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _required(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise GroundlensInputError(f"{where} has no {key!r} field")
    return d[key]


def _text(d: Mapping[str, Any], key: str, where: str) -> Text:
    """A text field: text, null, or a redacted/cut object (whose ``length`` is a count and whose
    kept ``text`` and digests are text)."""
    value = d.get(key)
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, Mapping):
        raise GroundlensInputError(
            f"{where}: {key} must be text, null or a redacted/cut text object, got {_kind(value)}"
        )
    if "length" in value and not _is_count(value["length"]):
        raise GroundlensInputError(f"{where}: {key}'s length must be a whole number, got {_kind(value['length'])}")
    for name in ("text", "hmac_sha256", "sha256"):
        if name in value and not isinstance(value[name], str):
            raise GroundlensInputError(f"{where}: {key}'s {name} must be text, got {_kind(value[name])}")
    return dict(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _string(d: Mapping[str, Any], key: str, where: str) -> str | None:
    """A text field that is never redacted (a model, a time, an error): text or null."""
    value = d.get(key)
    if value is None or isinstance(value, str):
        return value
    raise GroundlensInputError(f"{where}: {key} must be text or null, got {_kind(value)}")


def _name(d: Mapping[str, Any], key: str, where: str) -> str:
    """A required text field (an id, a name, the start time)."""
    value = _required(d, key, where)
    if isinstance(value, str):
        return value
    raise GroundlensInputError(f"{where}: {key} must be text, got {_kind(value)}")


def _count(d: Mapping[str, Any], key: str, where: str) -> int | None:
    """A whole number of at least 0, or null."""
    value = d.get(key)
    if value is None or _is_count(value):
        return value
    raise GroundlensInputError(f"{where}: {key} must be a whole number of at least 0, got {_kind(value)}")


def _number(d: Mapping[str, Any], key: str, where: str) -> float | None:
    """A finite number, or null."""
    value = d.get(key)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
        return value
    raise GroundlensInputError(f"{where}: {key} must be a number or null, got {_kind(value)}")


def _choice(d: Mapping[str, Any], key: str, choices: tuple, where: str, *, required: bool = True) -> Any:
    """One of ``choices`` (what the exporters and the report know how to show)."""
    value = _required(d, key, where) if required else d.get(key)
    if isinstance(value, (str, type(None))) and value in choices:
        return value
    shown = ", ".join("null" if c is None else c for c in choices)
    got = repr(value)[:40] if isinstance(value, str) else _kind(value)
    raise GroundlensInputError(f"{where}: {key} must be one of {shown}, got {got}")


def _mapping(d: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = d.get(key) or {}
    if not isinstance(value, Mapping):
        raise GroundlensInputError(f"{where}: {key} must be an object, got {_kind(value)}")
    return dict(value)


def shrink_text(value: Text, redact: bool, max_chars: int | None) -> Text:
    """A text field after redaction (keyed digest + length) or cutting (first ``max_chars`` + full length).

    Redaction also covers a field that was cut earlier (a trace saved with ``max_text_chars``):
    its kept part is hashed, its recorded full length kept.
    """
    if isinstance(value, Mapping) and redact and not value.get("redacted"):
        kept = str(value.get("text", ""))
        return {"redacted": True, "hmac_sha256": redaction_digest(kept), "length": int(value.get("length", len(kept)))}
    if not isinstance(value, str):
        return value
    if redact:
        return {"redacted": True, "hmac_sha256": redaction_digest(value), "length": len(value)}
    if max_chars is not None and len(value) > max_chars:
        return {"text": value[:max_chars], "truncated": True, "length": len(value)}
    return value


#: the keys of a score dict whose values are text quoted from, or written about, the step's texts
_SCORE_TEXT_KEYS = frozenset({"explanation", "text", "passage", "source", "reason", "comment"})


def cut_score_texts(score: dict[str, Any], max_chars: int) -> dict[str, Any] | None:
    """``score`` (a score dict) with every text in it (the explanation, evidence sentences and their
    passages, unsupported words, facts and what the source says, the decision's reason and findings)
    at most ``max_chars`` long, cut with an ellipsis; None when none is longer."""
    limit = max(0, int(max_chars))
    changed = False

    def walk(value: Any, key: str | None) -> Any:
        nonlocal changed
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str) and key in _SCORE_TEXT_KEYS and len(value) > limit:
            changed = True
            return value[: limit - 1] + "\u2026" if limit else ""
        return value

    out = walk(score, None)
    return out if changed else None


def redact_string(value: str | None) -> str | None:
    """Error texts stay strings in the format: redacted, they say only how long they were."""
    if value is None:
        return None
    return plain_text(shrink_text(value, True, None))


def redact_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata keeps its keys; every value (tool arguments, inputs) is replaced."""
    return {str(k): "[redacted]" for k in value}


def new_id() -> str:
    """A random 128-bit id as 32 hex digits (the length of ``uuid4().hex``).

    From ``random`` (seeded from the OS, reseeded in forked children), not ``uuid4``: ``os.urandom``
    is a system call that lets go of the GIL, and on the agent's thread, with the scoring worker
    busy, getting it back can take a scheduler switch interval (measured: ~0.2 ms per id on the
    provider benchmark). These ids name traces and steps; they are not secrets.
    """
    return f"{random.getrandbits(128):032x}"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``Trace.to_dict()`` (shipped as ``groundlens_core/trace/schema.json``)."""
    from importlib import resources

    return json.loads(resources.files("groundlens_core.trace").joinpath("schema.json").read_text(encoding="utf-8"))


def atomic_write_text(path: Any, text: str) -> None:
    """Write ``text`` as UTF-8 through the one output writer (:func:`groundlens_core.batch.outputs.write_text`):
    a temporary file beside ``path`` renamed over it, keeping an existing file's mode and group; a
    FIFO or device is refused and an OS error names ``path``."""
    from groundlens_core.batch.outputs import write_text

    write_text(path, text)
