"""The HTML triage report: one self-contained, offline file that puts the riskiest steps first.

Rendered from the Jinja templates in ``groundlens_core.templates`` with autoescaping on for
everything, so every piece of LLM text lands in the page as text. The table rows are rendered here;
the details of a row are built by the page's inline script from an embedded JSON block (inserted with
``textContent`` only) when the row is expanded, which keeps 5,000-step reports light. CSS, JS and the
score histogram (SVG) are inline; a Content-Security-Policy forbids every network request.
Scores are triage signals for ranking, not verdicts of truth.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache, lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2
from markupsafe import Markup

from groundlens_core._version import __version__
from groundlens_core.scoring.bands import SCORED_METHODS, TRIAGE_NOTE_LONG, TRIAGE_ORDER, band_order, risk_key
from groundlens_core.trace.html.rows import (
    _band_css,
    _duration,
    _evidence,
    _finding_marks,
    _fmt_ms,
    _fmt_num,
    _fmt_time,
    _num,
    _preview,
    _producers,
    _reason,
    _text_note,
    _tokens,
    detail_pairs,
    shown_score,
)
from groundlens_core.trace.model import Step, Trace, atomic_write_text, plain_text

__all__ = ["render_html", "trace_to_html", "write_html"]

#: the order the report lists bands in (cards, filters, legends): the triage bands, then the
#: steps without a score. Ranks, colours and counts come from ``groundlens_core.scoring.bands``.
REPORT_BANDS: tuple[str, ...] = (*TRIAGE_ORDER, "error", "skipped")
PAGE_SIZE = 100  # rows laid out at once; the rest are built from the embedded JSON when shown
MAX_NODE_ROWS = 100  # the per-node panel lists the worst ones
HISTOGRAM_BINS = 20
_TEMPLATE_PACKAGE = "groundlens_core.templates"

# ---------------------------------------------------------------- public API


def render_html(
    traces: Trace | Sequence[Trace],
    *,
    title: str | None = None,
    redact: bool = False,
    max_text_chars: int | None = None,
    population: Mapping[str, Any] | None = None,
) -> str:
    """The report for one trace or several (a batch, several graph runs) as one HTML string.

    ``redact`` keeps only a SHA-256 and the length of every question, response and context text;
    ``max_text_chars`` cuts long texts (their full length is shown). ``population`` is for a batch
    too big to show whole: the steps are its riskiest rows, and ``population`` holds the summary
    over every row (``rows``, ``counts`` by band, ``methods``, ``histogram`` bins of normalized
    scores by band), shown above the table and as the score distribution.
    """
    trace_list = _as_traces(traces)
    context = _build_context(trace_list, title=title, redact=redact, max_text_chars=max_text_chars)
    context["population"] = None
    if population is not None:
        context["population"] = {**population, "shown": context["total"]}
        context["histogram"] = _histogram_svg_model(list(population["histogram"]))
    return _environment().get_template("report.html.j2").render(**context)


def write_html(traces: Trace | Sequence[Trace], path: str | Path, **kwargs: Any) -> Path:
    """Write :func:`render_html` to ``path`` (parent folders are created) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render_html(traces, **kwargs))
    return out


def trace_to_html(trace: Trace, path: str | Path | None = None, **kwargs: Any) -> str:
    """:meth:`Trace.to_html`: the report of ``trace`` as HTML, also written to ``path`` (parent
    folders are created) when given."""
    html = render_html(trace, **kwargs)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, html)
    return html


# ---------------------------------------------------------------- templates


def _load_template(name: str) -> str:
    return files(_TEMPLATE_PACKAGE).joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        autoescape=True,  # everything, whatever the template's name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt_num"] = _fmt_num
    return env


@cache
def _asset(name: str) -> str:
    """An inline CSS/JS file of ours, read once."""
    return _load_template(name)


# ---------------------------------------------------------------- data preparation


def _as_traces(traces: Any) -> list[Trace]:
    if isinstance(traces, (Trace, Mapping)):
        traces = [traces]
    out = []
    for t in traces:
        if isinstance(t, Mapping):
            t = Trace.from_dict(t)
        if not isinstance(t, Trace):
            raise TypeError(f"render_html takes Trace objects, got {type(t).__name__}")
        out.append(t)
    return out


def unique_labels(names: list[str]) -> list[str]:
    """One label per trace, all different: the report filters rows by label, so two traces sharing
    one would show each other's rows. A name used once is its own label; repeated names get
    ``name #k`` with the smallest ``k`` that is neither another trace's name nor a label already given."""
    uses = collections.Counter(names)
    taken = set(names)
    next_k: dict[str, int] = {}
    labels = []
    for name in names:
        if uses[name] == 1:
            labels.append(name)
            continue
        k = next_k.get(name, 1)
        while f"{name} #{k}" in taken:
            k += 1
        label = f"{name} #{k}"
        taken.add(label)
        next_k[name] = k + 1
        labels.append(label)
    return labels


@dataclass(frozen=True)
class _Layout:
    """What every row of the report is built from: the traces as given (the facts panel reads the
    unredacted score) and as shown (every text comes from this one redacted or cut view), their
    labels, and the report order with each step's place in it, since rows point at each other
    (parent, cascade, revision, context producer) by that place."""

    traces: list[Trace]
    shown: list[Trace]
    labels: list[str]
    redact: bool
    entries: list[tuple[int, Step]]  # (trace index, step as shown), in report order
    position: dict[tuple[int, str], int]  # (trace index, step id) -> place in ``entries``
    producers: list[dict[str, list[Any]]]  # per trace: step id -> the producer of each context piece


def _layout(traces: list[Trace], *, redact: bool, max_text_chars: int | None) -> _Layout:
    """The steps of every trace riskiest first, a step carrying a flagged step's output right after
    it (see ``lineage.cascade_order``)."""
    from groundlens_core.trace.lineage import cascade_order

    labels = unique_labels([t.name for t in traces])
    entries: list[tuple[tuple[int, float, int, int], int, Step]] = []
    shown = [t.view(redact=redact, max_text_chars=max_text_chars) for t in traces]
    producers: list[dict[str, list[Any]]] = []
    for ti, trace in enumerate(shown):
        for step in trace.steps:
            entries.append((risk_key(step.band, shown_score(step), ti, step.index), ti, step))
        producers.append(_producers(trace.steps))
    entries.sort(key=lambda e: e[0])
    entries = cascade_order(
        entries, key=lambda e: (e[1], str(e[2].id)), origins_of=lambda e: [(e[1], o) for o in e[2].cascade_from]
    )
    return _Layout(
        traces=traces,
        shown=shown,
        labels=labels,
        redact=redact,
        entries=[(ti, step) for _, ti, step in entries],
        position={(ti, str(step.id)): k for k, (_, ti, step) in enumerate(entries)},
        producers=producers,
    )


@dataclass
class _NodeTally:
    """One node's steps across the traces, for the per-node panels."""

    name: str
    steps: int = 0
    scored: list[float] = field(default_factory=list)  # the scores of its scored steps
    bands: dict[str, int] = field(default_factory=lambda: {b: 0 for b in REPORT_BANDS})
    traces: set[int] = field(default_factory=set)


@dataclass
class _Tally:
    """What the report counts over its steps: the band cards, the scoring methods, the score
    histogram, the per-node panels and each trace's worst row."""

    counts: dict[str, int] = field(default_factory=lambda: {b: 0 for b in REPORT_BANDS})
    methods: dict[str, int] = field(default_factory=lambda: {m: 0 for m in SCORED_METHODS})
    histogram: list[dict[str, int]] = field(
        default_factory=lambda: [{b: 0 for b in TRIAGE_ORDER} for _ in range(HISTOGRAM_BINS)]
    )
    nodes: dict[str, _NodeTally] = field(default_factory=dict)
    worst_of: dict[int, int] = field(default_factory=dict)  # trace index -> its first (riskiest) row

    def add(self, rank: int, ti: int, step: Step) -> None:
        """Count the step at ``rank``; rows come riskiest first, so a trace's first one is its worst."""
        band = step.band
        norm = shown_score(step)
        self.counts[band] += 1
        self.worst_of.setdefault(ti, rank)
        if step.method in self.methods:
            self.methods[step.method] += 1
        if norm is not None and band in TRIAGE_ORDER:
            self.histogram[min(HISTOGRAM_BINS - 1, max(0, int(norm * HISTOGRAM_BINS)))][band] += 1
        name = str(step.node)
        node = self.nodes.get(name)
        if node is None:
            node = self.nodes[name] = _NodeTally(name)
        node.steps += 1
        node.bands[band] += 1
        node.traces.add(ti)
        if norm is not None:
            node.scored.append(norm)


def _row(layout: _Layout, rank: int, ti: int, step: Step, question: str, response: str) -> dict[str, Any]:
    """A table row as the page's script lays it out: what is shown and filtered on without expanding."""
    norm = shown_score(step)
    raw = _num(step.value) if step.method in SCORED_METHODS else None
    position = layout.position
    return {
        "id": str(step.id),
        "rank": rank + 1,
        "band": step.band,
        "method": step.method,
        "kind": step.kind,
        "node": str(step.node),
        "trace": layout.labels[ti],
        "t": ti,
        "index": step.index,
        # what the Step column shows: a batch row's own label (its id column, else "row <n>"
        # from 1), an agent step's place in its trace
        "step": str(step.id) if layout.shown[ti].framework == "batch" else str(step.index),
        "score": None if norm is None else round(norm, 6),
        "norm": "" if norm is None else f"{norm:.2f}",
        "raw": "" if raw is None else f"{step.method.upper()} {raw:.2f}",
        "weak": step.method == "dgi",
        "question": _preview(question),
        "response": _preview(response),
        "note": _text_note(step.response) or _text_note(step.question),
        "reason": _reason(step),
        "latency": _num(step.llm_latency_ms),
        "lat": _fmt_ms(step.llm_latency_ms),
        "model": str(step.model or ""),
        "tok": _tokens(step),
        "parent": position.get((ti, str(step.parent_id))) if step.parent_id else None,
        "casc": [position[(ti, o)] for o in step.cascade_from if (ti, o) in position],
        "rev": position.get((ti, str(step.revision_of))) if step.revision_of else None,
    }


def _details(layout: _Layout, ti: int, step: Step, question: str, response: str) -> dict[str, Any]:
    """What a row shows when expanded; kept in the embedded JSON until then, so big reports stay light."""
    prod = layout.producers[ti].get(str(step.id), [])
    ev = getattr(step.result, "evidence", None)
    return {
        "q": question,
        "qn": _text_note(step.question),
        "r": response,
        "rn": _text_note(step.response),
        "ctx": [
            [
                str(c.source),
                plain_text(c.text),
                _text_note(c.text),
                layout.position.get((ti, str(prod[k]))) if k < len(prod) and prod[k] else None,
            ]
            for k, c in enumerate(step.context)
        ],
        "ex": str(step.explanation or ""),
        "err": str(step.error or ""),
        "skip": str(step.skip_reason or ""),
        "facts": detail_pairs(step, layout.traces[ti]),
        "ff": [] if ev is None else [[f.status, f.describe(), f.kind] for f in ev.facts],
        "ev": _evidence(step),
        "fm": _finding_marks(step),
        "meta": "" if layout.redact or not step.metadata else _json_text(step.metadata),
    }


def _node_rows(nodes: Mapping[str, _NodeTally]) -> list[dict[str, Any]]:
    """The "By node" panel: one row per node, the worst band first, then the lowest mean score."""
    node_rows: list[dict[str, Any]] = []
    for node in nodes.values():
        worst = min((b for b in REPORT_BANDS if node.bands[b]), key=band_order)
        mean = sum(node.scored) / len(node.scored) if node.scored else None
        scored = len(node.scored)
        flagged = node.bands["flagged"]
        node_rows.append(
            {
                "name": node.name,
                "steps": node.steps,
                "scored": scored,
                "bands": node.bands,
                "traces": len(node.traces),
                "worst": worst,
                "mean": "" if mean is None else f"{mean:.2f}",
                "mean_value": mean,
                "flagged": flagged,
                "rate_value": flagged / scored if scored else 0.0,
                "rate": f"{flagged / scored:.0%}" if scored else "-",
            }
        )
    node_rows.sort(key=lambda n: risk_key(n["worst"], n["mean_value"], n["name"]))
    return node_rows


def _trace_rows(layout: _Layout, worst_of: Mapping[int, int], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per trace as shown, with its worst row (the run details and the trace filter)."""
    trace_rows = []
    for ti, trace in enumerate(layout.shown):
        w = worst_of.get(ti)
        trace_rows.append(
            {
                "label": layout.labels[ti],
                "name": trace.name,
                "framework": trace.framework,
                "id": trace.id,
                "started": _fmt_time(trace.started_at),
                "duration": _duration(trace.started_at, trace.ended_at),
                "status": trace.status,
                "error": trace.error or "",
                "steps": len(trace.steps),
                "counts": trace.counts(),
                "cascades": sum(1 for s in trace.steps if s.cascade_from),
                "worst": w,
                "worst_band": "" if w is None else rows[w]["band"],
                "worst_node": "" if w is None else rows[w]["node"],
                "worst_reason": "" if w is None else rows[w]["reason"],
                "fingerprint": trace.fingerprint or "",
                "package_version": trace.package_version,
            }
        )
    return trace_rows


def _run_header(
    traces: list[Trace], labels: list[str], trace_rows: list[dict[str, Any]], title: str | None
) -> dict[str, Any]:
    """The page's title and the run details above the table, read from the traces as given."""
    started = [t.started_at for t in traces if t.started_at]
    if title is None:
        title = f"groundlens triage: {labels[0]}" if len(traces) == 1 else f"groundlens triage: {len(traces)} traces"
    return {
        "title": title,
        "note": TRIAGE_NOTE_LONG[0].upper() + TRIAGE_NOTE_LONG[1:] + ".",
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "renderer_version": __version__,
        "traces": trace_rows if len(trace_rows) <= 1 else [],
        "n_traces": len(traces),
        "multi": len(traces) > 1,
        "frameworks": sorted({t.framework for t in traces}),
        "fingerprints": sorted({t.fingerprint for t in traces if t.fingerprint}),
        "versions": sorted({t.package_version for t in traces}),
        "started": _fmt_time(min(started)) if started else "",
    }


def _inline_assets() -> dict[str, Any]:
    """The page's own CSS and JS, and the Content-Security-Policy that lets only that script run
    (by its hash) and forbids every network request."""
    script = _asset("report.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return {
        "css": Markup(_band_css() + _asset("report.css")),
        "js": Markup(script),
        "csp": (
            f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'; "
            "base-uri 'none'; form-action 'none'"
        ),
    }


def _build_context(
    traces: list[Trace], *, title: str | None, redact: bool, max_text_chars: int | None
) -> dict[str, Any]:
    """Everything the template reads: the table rows and their details go into one JSON block, the
    counts, node panels and histogram are rendered by the template itself."""
    layout = _layout(traces, redact=redact, max_text_chars=max_text_chars)
    tally = _Tally()
    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for rank, (ti, step) in enumerate(layout.entries):
        tally.add(rank, ti, step)
        question, response = plain_text(step.question), plain_text(step.response)
        rows.append(_row(layout, rank, ti, step, question, response))
        details.append(_details(layout, ti, step, question, response))

    node_rows = _node_rows(tally.nodes)
    # "which node misbehaves most": the flagged share of each node's scored steps, across traces
    rate_rows = sorted(node_rows, key=lambda n: (-n["rate_value"], -n["flagged"], n["name"]))
    trace_rows = _trace_rows(layout, tally.worst_of, rows)
    data = {"rows": rows, "steps": details, "traces": trace_rows, "page": PAGE_SIZE}
    return {
        **_run_header(traces, layout.labels, trace_rows, title),
        "redacted": redact,
        "max_text_chars": max_text_chars,
        "total": len(rows),
        "counts": tally.counts,
        "methods": tally.methods,
        "cascades": sum(1 for r in rows if r["casc"]),
        "unscored": {k: sum(t.unscored()[k] for t in traces) for k in ("overload", "pending")},
        "page_size": PAGE_SIZE,
        "nodes": node_rows[:MAX_NODE_ROWS],
        "rates": rate_rows[:MAX_NODE_ROWS],
        "more_nodes": max(0, len(node_rows) - MAX_NODE_ROWS),
        "node_names": sorted(tally.nodes)[:2000],
        "histogram": _histogram_svg_model(tally.histogram),
        "bands": REPORT_BANDS,
        "triage_bands": TRIAGE_ORDER,
        "data_json": _script_json(data),
        **_inline_assets(),
    }


def _histogram_svg_model(bins: list[dict[str, int]]) -> dict[str, Any]:
    """Geometry of the stacked histogram (normalized score, coloured by band), drawn by the template."""
    width, height, left, bottom, top = 560, 190, 36, 26, 8
    plot_w, plot_h = width - left - 18, height - bottom - top
    peak = max((sum(b.values()) for b in bins), default=0)
    ymax = max(1, peak)
    bar_w = plot_w / len(bins)
    bars = []
    for k, b in enumerate(bins):
        y = float(top + plot_h)
        lo, hi = k / len(bins), (k + 1) / len(bins)
        for band in TRIAGE_ORDER:
            n = b[band]
            if not n:
                continue
            h = plot_h * n / ymax
            y -= h
            bars.append(
                {
                    "x": f"{left + k * bar_w + 1:.1f}",
                    "y": f"{y:.1f}",
                    "w": f"{bar_w - 2:.1f}",
                    "h": f"{h:.1f}",
                    "band": band,
                    "title": f"score {lo:.2f}-{hi:.2f}: {n} {band}",
                }
            )
    xticks = [{"x": f"{left + plot_w * t / 4:.1f}", "label": f"{t / 4:.2f}"} for t in range(5)]
    yticks = [
        {"y": f"{top + plot_h - plot_h * v / ymax:.1f}", "label": str(v)}
        for v in sorted({0, ymax // 2, ymax})
        if v <= ymax
    ]
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "bottom": top + plot_h,
        "right": left + plot_w,
        "bars": bars,
        "xticks": xticks,
        "yticks": yticks,
        "empty": peak == 0,
    }


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _script_json(data: Any) -> Markup:
    """JSON that can sit inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` survive
    literally, so no text can close the element or open a comment."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:  # a non-finite float somewhere: rare, so only then walk the data
        text = json.dumps(_clean(data), ensure_ascii=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return Markup(text)
