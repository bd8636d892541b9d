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
from datetime import datetime, timezone
from functools import cache, lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2
from markupsafe import Markup

from groundlens_core._version import __version__
from groundlens_core.bands import SCORED_METHODS, TRIAGE_NOTE_LONG, TRIAGE_ORDER, risk_key, risk_rank
from groundlens_core.trace.html_rows import (
    _band_css,
    _duration,
    _evidence,
    _facts,
    _finding_marks,
    _fmt_ms,
    _fmt_num,
    _fmt_time,
    _norm,
    _num,
    _preview,
    _producers,
    _reason,
    _text_note,
    _tokens,
)
from groundlens_core.trace.model import Step, Trace, atomic_write_text, plain_text

__all__ = ["render_html", "write_html"]

#: the order the report lists bands in (cards, filters, legends): the triage bands, then the
#: steps without a score. Ranks, colours and counts come from ``groundlens_core.bands``.
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


def _build_context(
    traces: list[Trace], *, title: str | None, redact: bool, max_text_chars: int | None
) -> dict[str, Any]:
    from groundlens_core.trace.lineage import cascade_order

    labels = unique_labels([t.name for t in traces])

    entries: list[tuple[tuple[int, float, int, int], int, Step]] = []
    shown = [t.view(redact=redact, max_text_chars=max_text_chars) for t in traces]  # the one redacted view
    producers: list[dict[str, list[Any]]] = []
    for ti, trace in enumerate(shown):
        for step in trace.steps:
            entries.append((risk_key(step.band, _norm(step), ti, step.index), ti, step))
        producers.append(_producers(trace.steps))
    entries.sort(key=lambda e: e[0])
    # a step carrying a flagged step's output comes right after it (see lineage.cascade_order)
    entries = cascade_order(
        entries, key=lambda e: (e[1], str(e[2].id)), origins_of=lambda e: [(e[1], o) for o in e[2].cascade_from]
    )
    position = {(ti, str(step.id)): k for k, (_, ti, step) in enumerate(entries)}

    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    counts = {b: 0 for b in REPORT_BANDS}
    methods = {m: 0 for m in SCORED_METHODS}
    nodes: dict[str, dict[str, Any]] = {}
    worst_of: dict[int, int] = {}
    histogram = [{b: 0 for b in TRIAGE_ORDER} for _ in range(HISTOGRAM_BINS)]
    for rank, (_, ti, step) in enumerate(entries):
        band = step.band
        norm = _norm(step)
        counts[band] += 1
        worst_of.setdefault(ti, rank)
        if step.method in methods:
            methods[step.method] += 1
        if norm is not None and band in TRIAGE_ORDER:
            histogram[min(HISTOGRAM_BINS - 1, max(0, int(norm * HISTOGRAM_BINS)))][band] += 1
        node = nodes.setdefault(
            str(step.node),
            {"name": str(step.node), "steps": 0, "scored": [], "bands": {b: 0 for b in REPORT_BANDS}, "traces": set()},
        )
        node["steps"] += 1
        node["bands"][band] += 1
        node["traces"].add(ti)
        if norm is not None:
            node["scored"].append(norm)

        question, response = plain_text(step.question), plain_text(step.response)
        raw = _num(step.value) if step.method in SCORED_METHODS else None
        parent = position.get((ti, str(step.parent_id))) if step.parent_id else None
        rows.append(
            {
                "id": str(step.id),
                "rank": rank + 1,
                "band": band,
                "method": step.method,
                "kind": step.kind,
                "node": str(step.node),
                "trace": labels[ti],
                "t": ti,
                "index": step.index,
                # what the Step column shows: a batch row's own label (its id column, else "row <n>"
                # from 1), an agent step's place in its trace
                "step": str(step.id) if shown[ti].framework == "batch" else str(step.index),
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
                "parent": parent,
                "casc": [position[(ti, o)] for o in step.cascade_from if (ti, o) in position],
                "rev": position.get((ti, str(step.revision_of))) if step.revision_of else None,
            }
        )
        prod = producers[ti].get(str(step.id), [])
        ev = getattr(step.score, "evidence", None)
        details.append(
            {
                "q": question,
                "qn": _text_note(step.question),
                "r": response,
                "rn": _text_note(step.response),
                "ctx": [
                    [
                        str(c.source),
                        plain_text(c.text),
                        _text_note(c.text),
                        position.get((ti, str(prod[k]))) if k < len(prod) and prod[k] else None,
                    ]
                    for k, c in enumerate(step.context)
                ],
                "ex": str(step.explanation or ""),
                "err": str(step.error or ""),
                "skip": str(step.skip_reason or ""),
                "facts": _facts(step, traces[ti]),
                "ff": [] if ev is None else [[f.status, f.describe(), f.kind] for f in ev.facts],
                "ev": _evidence(step),
                "fm": _finding_marks(step),
                "meta": "" if redact or not step.metadata else _json_text(step.metadata),
            }
        )

    node_rows = []
    for node in nodes.values():
        worst = min((b for b in REPORT_BANDS if node["bands"][b]), key=risk_rank)
        mean = sum(node["scored"]) / len(node["scored"]) if node["scored"] else None
        scored = len(node["scored"])
        flagged = node["bands"]["flagged"]
        node_rows.append(
            {
                **node,
                "worst": worst,
                "mean": "" if mean is None else f"{mean:.2f}",
                "mean_value": mean,
                "scored": scored,
                "flagged": flagged,
                "traces": len(node["traces"]),
                "rate_value": flagged / scored if scored else 0.0,
                "rate": f"{flagged / scored:.0%}" if scored else "-",
            }
        )
    node_rows.sort(key=lambda n: risk_key(n["worst"], n["mean_value"], n["name"]))
    # "which node misbehaves most": the flagged share of each node's scored steps, across traces
    rate_rows = sorted(node_rows, key=lambda n: (-n["rate_value"], -n["flagged"], n["name"]))

    trace_rows = []
    for ti, trace in enumerate(shown):
        w = worst_of.get(ti)
        trace_rows.append(
            {
                "label": labels[ti],
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

    script = _asset("report.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    fingerprints = sorted({t.fingerprint for t in traces if t.fingerprint})
    frameworks = sorted({t.framework for t in traces})
    versions = sorted({t.package_version for t in traces})
    if title is None:
        title = f"groundlens triage: {labels[0]}" if len(traces) == 1 else f"groundlens triage: {len(traces)} traces"
    started = [t.started_at for t in traces if t.started_at]
    data = {"rows": rows, "steps": details, "traces": trace_rows, "page": PAGE_SIZE}
    return {
        "title": title,
        "note": TRIAGE_NOTE_LONG[0].upper() + TRIAGE_NOTE_LONG[1:] + ".",
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "renderer_version": __version__,
        "traces": trace_rows if len(trace_rows) <= 1 else [],
        "n_traces": len(traces),
        "multi": len(traces) > 1,
        "frameworks": frameworks,
        "fingerprints": fingerprints,
        "versions": versions,
        "started": _fmt_time(min(started)) if started else "",
        "redacted": redact,
        "max_text_chars": max_text_chars,
        "total": len(rows),
        "counts": counts,
        "methods": methods,
        "cascades": sum(1 for r in rows if r["casc"]),
        "unscored": {k: sum(t.unscored()[k] for t in traces) for k in ("overload", "pending")},
        "page_size": PAGE_SIZE,
        "nodes": node_rows[:MAX_NODE_ROWS],
        "rates": rate_rows[:MAX_NODE_ROWS],
        "more_nodes": max(0, len(node_rows) - MAX_NODE_ROWS),
        "node_names": sorted(nodes)[:2000],
        "histogram": _histogram_svg_model(histogram),
        "bands": REPORT_BANDS,
        "triage_bands": TRIAGE_ORDER,
        "data_json": _script_json(data),
        "css": Markup(_band_css() + _asset("report.css")),
        "js": Markup(script),
        "csp": (
            f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'; "
            "base-uri 'none'; form-action 'none'"
        ),
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
