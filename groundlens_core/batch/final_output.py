"""The second pass of a run: rows read back by offset, and the complete output put in place.

``--sort`` and the HTML report read the written rows through the keys file instead of holding them
in memory; the target appears only here, by a rename or a copy into a temporary file beside it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from groundlens_core.batch.outputs import adopt_attributes, refuse_link, replacing, with_path
from groundlens_core.batch.partial_output import PartialPaths


def risk_order(keys: np.ndarray) -> np.ndarray:
    """Row indices riskiest first: band, lowest normalized score, then input order (a stable sort)."""
    return np.lexsort((np.arange(len(keys)), keys["norm"], keys["band"]))


def read_rows_at(
    out_kind: str,
    paths: PartialPaths,
    keys: np.ndarray,
    indices: Sequence[int],
    columns: list[str],
    schema=None,
    *,
    each: Callable[[dict], dict] | None = None,
) -> list[dict]:
    """The written rows at ``indices`` (in that order), read back by offset: the second pass never
    holds more rows than it was asked for. ``each`` is applied to every row as it is read, so what
    it drops (a long text cut) is never held for all the rows at once."""
    each = each or (lambda row: row)
    if out_kind == "parquet":
        tables = _arrow_rows(paths, keys, indices)
        if tables is None:
            return []
        return [each(row) for batch in tables.to_batches() for row in batch.to_pylist()]
    import csv as _csv
    import io as _io

    out = []
    ends = _row_ends(paths, keys)
    with open(paths.partial, "rb") as fh:
        for i in indices:
            fh.seek(int(keys["offset"][i]))
            blob = fh.read(int(ends[i] - keys["offset"][i])).decode("utf-8")
            if out_kind == "csv":
                cells = next(_csv.reader(_io.StringIO(blob, newline="")))
                out.append(each(dict(zip(columns, cells))))
            else:
                out.append(each(json.loads(blob)))
    return out


def _row_ends(paths: PartialPaths, keys: np.ndarray) -> np.ndarray:
    ends = np.empty(len(keys), dtype=np.int64)
    if len(keys):
        ends[:-1] = keys["offset"][1:]
        ends[-1] = paths.partial.stat().st_size
    return ends


def _part_rows(paths: PartialPaths) -> list[tuple[Path, int, int]]:
    """(part file, first row, rows) of each Arrow part, in order."""
    import pyarrow as pa

    out, first = [], 0
    for part in sorted(paths.partial.glob("part-*.arrow")):
        with pa.memory_map(str(part)) as src:
            n = pa.ipc.open_file(src).read_all().num_rows
        out.append((part, first, n))
        first += n
    return out


def _arrow_rows(paths: PartialPaths, keys: np.ndarray | None, indices: Sequence[int], parts: list | None = None):
    """The rows at ``indices`` from the memory-mapped Arrow parts (zero-copy reads), as one table."""
    import bisect

    import pyarrow as pa

    parts = parts if parts is not None else _part_rows(paths)
    starts = [p[1] for p in parts]
    pieces = []
    cache: dict[int, Any] = {}
    for i in indices:
        k = bisect.bisect_right(starts, int(i)) - 1
        if k not in cache:
            if len(cache) > 256:
                cache.clear()
            cache[k] = pa.ipc.open_file(pa.memory_map(str(parts[k][0]))).read_all()
        pieces.append(cache[k].slice(int(i) - parts[k][1], 1))
    return pa.concat_tables(pieces) if pieces else None


def finalize(
    out_kind: str,
    paths: PartialPaths,
    output: Path,
    columns: list[str],
    schema,
    keys: np.ndarray,
    order: np.ndarray | None,
) -> None:
    """Put the complete output in place: a rename for CSV/JSONL in input order; otherwise a second
    pass into a temporary file beside the target, then a rename. Either way the output keeps the
    mode and group of the file it replaces (see :mod:`groundlens_core.batch.outputs`)."""
    if out_kind != "parquet" and order is None:
        refuse_link(paths.partial, "partial output", output)
        try:
            adopt_attributes(paths.partial, output)
            os.replace(paths.partial, output)
        except OSError as exc:
            raise with_path(exc, output) from None
        return
    with replacing(output) as tmp:
        if out_kind == "parquet":
            _write_parquet(paths, tmp, schema, order)
        else:
            _write_sorted_text(out_kind, paths, tmp, columns, keys, order)  # type: ignore[arg-type]


def _write_sorted_text(
    out_kind: str, paths: PartialPaths, tmp: Path, columns: list[str], keys: np.ndarray, order: np.ndarray
) -> None:
    from groundlens_core.batch.io_formats import csv_header

    ends = _row_ends(paths, keys)
    with open(paths.partial, "rb") as src, open(tmp, "wb") as dst:
        if out_kind == "csv":
            dst.write(csv_header(columns))
        for i in order:
            src.seek(int(keys["offset"][i]))
            dst.write(src.read(int(ends[i] - keys["offset"][i])))


def _write_parquet(
    paths: PartialPaths, tmp: Path, schema, order: np.ndarray | None, rows_per_group: int = 16384
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetWriter(str(tmp), schema) as writer:
        if order is None:
            # whole parts gathered into row groups of about ``rows_per_group`` rows (256-row groups
            # would make the file slow to read); the grouping depends only on the parts, so a
            # resumed run writes the same bytes
            buffered: list = []
            n = 0
            for part, _, rows in _part_rows(paths):
                buffered.append(pa.ipc.open_file(pa.memory_map(str(part))).read_all())
                n += rows
                if n >= rows_per_group:
                    writer.write_table(pa.concat_tables(buffered).combine_chunks(), row_group_size=n)
                    buffered, n = [], 0
            if buffered:
                writer.write_table(pa.concat_tables(buffered).combine_chunks(), row_group_size=n)
        else:
            parts = _part_rows(paths)
            for s in range(0, len(order), rows_per_group):
                t = _arrow_rows(paths, None, order[s : s + rows_per_group], parts)  # type: ignore[arg-type]
                if t is not None:
                    writer.write_table(t.combine_chunks(), row_group_size=rows_per_group)
