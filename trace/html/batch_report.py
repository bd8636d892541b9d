"""The HTML report of a scored batch of any size, by a second pass over the written output.

A report of a million rows could not be read by a person nor opened by a browser, and building it
would hold every text in memory. So the report shows the riskiest ``html_rows`` rows (default
1,000) with their texts and details, and a summary over every row (counts by band and method, the
score distribution) computed from the 18-byte per-row keys the run wrote. The shown rows are read
back by offset; their details (explanation, distances, fingerprint) are the results the run kept
while it scored them (see :mod:`groundlens_core.batch.riskiest`), and a row it kept none for (scored
by an earlier process of a resumed run, or by Ray workers) is scored again: scores are
deterministic, so either way these are the same results the file holds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from groundlens_core.batch.columns import BAND_ORDER, METHOD_CODES, OUT_COLUMNS
from groundlens_core.scoring.bands import TRIAGE_ORDER
from groundlens_core.scoring.results import ScoreError
from groundlens_core.trace.html import HISTOGRAM_BINS  # the population's bins are the report's own

_BANDS_BY_CODE = {code: band for band, code in BAND_ORDER.items()}  # the band order of groundlens_core.scoring.bands


def population_summary(keys: np.ndarray) -> dict[str, Any]:
    """Counts by band and method and the score histogram over every row, from the keys alone."""
    counts = {b: int((keys["band"] == code).sum()) for code, b in _BANDS_BY_CODE.items()}
    methods = {m: int((keys["method"] == code).sum()) for m, code in METHOD_CODES.items() if m != "error"}
    hist = [{b: 0 for b in TRIAGE_ORDER} for _ in range(HISTOGRAM_BINS)]
    for band in TRIAGE_ORDER:
        norms = keys["norm"][keys["band"] == BAND_ORDER[band]]
        bins = np.clip((norms * HISTOGRAM_BINS).astype(np.int64), 0, HISTOGRAM_BINS - 1)
        for k, n in zip(*np.unique(bins, return_counts=True)):
            hist[int(k)][band] = int(n)
    return {"rows": int(len(keys)), "counts": counts, "methods": methods, "histogram": hist}


def _cell(value: Any) -> Any:
    """A kept column's value as the report shows it (JSON-able)."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def _row_label(row: dict, index: int, id_column: str = "id") -> str:
    """The row's own id (its id column) when it has one, else ``row <n>`` counted from 1."""
    value = row.get(id_column)
    return f"row {index + 1}" if value is None or str(value) == "" else str(value)


def _group(row: dict, group_by: str | None) -> str:
    value = row.get(group_by or "node")
    return "(none)" if group_by and (value is None or value == "") else str(value or "rows")


#: characters of each text an error row shows in the report: a row refused because a text is over
#: GROUNDLENS_MAX_CHARS may hold megabytes, which the report would carry and the browser hold whole
ERROR_TEXT_CHARS = 2000


def _cut(value: Any, limit: int = ERROR_TEXT_CHARS) -> Any:
    """A text cut to ``limit`` characters, saying how long it was; any other value as it is."""
    if not isinstance(value, str) or len(value) <= limit:
        return value
    return f"{value[:limit]}\u2026 [cut for the report: {len(value):,} characters]"


def _bounded(row: dict) -> dict:
    """A written row as the report holds it: an error row with every text cut (:func:`_cut`)."""
    return {k: _cut(v) for k, v in row.items()} if row.get("groundlens_method") == "error" else row


def write_batch_html(
    job, info, out_kind: str, paths, keys: np.ndarray, schema, *, emb, calibration, kept: Any = None
) -> int:
    """Write ``job.html``; returns how many rows it shows. ``kept`` (a
    :class:`~groundlens_core.batch.riskiest.RiskiestKeeper`, or None) holds the results the run kept
    of the rows shown: only the rows it has none for are scored here."""
    from groundlens_core.batch.final_output import read_rows_at, risk_order
    from groundlens_core.batch.io_formats import output_columns, renamed_inputs, row_item
    from groundlens_core.trace.html.batch_trace import trace_from_batch

    indices = risk_order(keys)[: max(0, job.html_rows)]
    columns = output_columns(info.columns)
    source = {new: old for old, new in renamed_inputs(info.columns).items()}
    # an error row's texts are cut as each row is read: a row refused as too long is never held whole
    written = read_rows_at(out_kind, paths, keys, indices, columns, schema, each=_bounded)  # type: ignore[arg-type]
    rows: list[dict] = []  # each row as the input had it (its columns under their own names)
    results: list[Any] = [None] * len(written)
    for i, w in enumerate(written):
        rows.append({source.get(k, k): v for k, v in w.items() if k not in OUT_COLUMNS})
        if w.get("groundlens_method") == "error":  # keep the error the run recorded (also read errors)
            results[i] = ScoreError(index=int(indices[i]), error=str(w.get("groundlens_error") or ""))
    del written
    items = [row_item(r, info.has_context, info.names) for r in rows]
    _fill_results(job, indices, items, results, kept, emb=emb, calibration=calibration)
    trace = trace_from_batch(rows, items, results, name=job.input.name)
    _name_steps(job, info, trace, rows, indices)
    trace.metadata["rows"] = int(len(keys))
    trace.metadata["shown"] = len(rows)
    population = population_summary(keys) if len(rows) < len(keys) else None
    title = f"groundlens triage: {job.input.name}"
    if population is not None:
        title += f" (riskiest {len(rows):,} of {len(keys):,} rows)"
    _write(job, trace, title, population)
    return len(rows)


def _fill_results(
    job, indices: np.ndarray, items: list[dict], results: list[Any], kept: Any, *, emb, calibration
) -> None:
    """The result of every shown row that is not an error: the one the run kept when it has it,
    else scored now (scores are deterministic: the same result the output's cells came from)."""
    from groundlens_core.batch.chunks import score_chunk
    from groundlens_core.batch.threads import scoring_threads

    todo = []
    for i, res in enumerate(results):
        if res is None:
            results[i] = None if kept is None else kept.result_for(int(indices[i]), items[i])
            if results[i] is None:
                todo.append(i)
    for start in range(0, len(todo), job.batch_size):
        part = todo[start : start + job.batch_size]
        with scoring_threads(job.threads):  # the run's --threads: these rows are often out of the cache
            scored = score_chunk(
                [items[i] for i in part], embedder=emb, calibration=calibration, long_context=job.long_context
            )
        for i, res in zip(part, scored):
            results[i] = res


def _name_steps(job, info, trace, rows: list[dict], indices: np.ndarray) -> None:
    """Name each step after its row in the file (its id column when it has one), not its place in
    the report; its node is the --group-by column (else the file's node column), never the row."""
    names = info.names
    group_by = getattr(job, "group_by", None)
    if group_by and group_by not in info.columns:
        from groundlens_core.errors import GroundlensInputError

        raise GroundlensInputError(f"--group-by {group_by}: {job.input} has no such column")
    kept = [c for c in dict.fromkeys((names.id, *getattr(job, "keep_columns", ()))) if c in info.columns]
    trace.steps[:] = [
        dataclasses.replace(
            s,
            id=_row_label(rows[k], int(indices[k]), names.id),
            index=int(indices[k]),
            node=_group(rows[k], group_by),
            metadata={"row": int(indices[k]) + 1, **{c: _cell(rows[k].get(c)) for c in kept}},
        )
        for k, s in enumerate(trace.steps)
    ]


def _write(job, trace, title: str, population: dict | None) -> None:
    from groundlens_core.trace.html import write_html

    try:
        write_html([trace], job.html, title=title, population=population)
    except OSError as exc:
        from groundlens_core.errors import GroundlensInputError

        raise GroundlensInputError(f"cannot write the HTML report {job.html}: {exc.strerror or exc}") from None
