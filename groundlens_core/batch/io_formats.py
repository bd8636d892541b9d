"""Tables in and out, one chunk at a time: CSV, JSONL and Parquet, by extension.

Why chunks: a day of production traffic is millions of rows; reading it whole makes memory grow
with the file. Readers yield row dicts lazily, writers append one chunk at a time, so a run holds
one chunk (plus the model) whatever the file size.

- Input: ``.csv``, ``.jsonl`` / ``.ndjson`` (each optionally ``.gz``), ``.parquet`` (needs
  ``pyarrow``: ``pip install "groundlens-core[parquet]"``).
- Output: ``.csv``, ``.jsonl`` / ``.ndjson``, ``.parquet``.

Problems with the file as a whole (not found, a directory, not UTF-8, a duplicate column name,
a malformed JSON line, missing ``question``/``response``) are one-line :class:`GroundlensInputError`
s found by :func:`scan_table` before any scoring. Problems with one CSV row (more fields than the
header) are recorded on that row (:data:`READ_ERROR`) and the row is not scored: nothing is
dropped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from groundlens_core.batch import json_input
from groundlens_core.batch.columns import OUT_COLUMN_TYPES, OUT_COLUMNS
from groundlens_core.batch.input_columns import DEFAULT as DEFAULT_COLUMNS
from groundlens_core.batch.input_columns import InputColumns
from groundlens_core.errors import GroundlensInputError

#: key of a row dict whose row could not be read as it stands (the row is written, not scored)
READ_ERROR = "\x00groundlens_read_error"

# a CSV cell may be as long as any text we accept; the default 131,072-character limit made a long
# response a traceback (`_csv.Error: field larger than field limit`) instead of a row error
csv.field_size_limit(2**31 - 1)

_KINDS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
PARQUET_HINT = 'Parquet needs pyarrow: pip install "groundlens-core[parquet]"'


def table_kind(path: str | Path, *, output: bool = False) -> tuple[str, bool]:
    """``(kind, gzipped)`` from the file name: ``("csv" | "jsonl" | "parquet", bool)``."""
    name = Path(path).name.lower()
    gz = name.endswith(".gz")
    kind = _KINDS.get(Path(name[:-3] if gz else name).suffix)
    if kind is None or (gz and (output or kind == "parquet")):
        what = "output" if output else "file"
        allowed = ".csv, .jsonl or .parquet" if output else ".csv, .jsonl, .parquet (.csv.gz, .jsonl.gz)"
        suffix = "".join(Path(name).suffixes[-2:]) or "(none)"
        raise GroundlensInputError(f"{path}: unsupported {what} type {suffix}; use {allowed}")
    return kind, gz


def _pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise GroundlensInputError(PARQUET_HINT) from None
    return pyarrow


@dataclass(frozen=True)
class TableInfo:
    """What one pass over an input file found: its columns (in order) and number of rows."""

    path: Path
    kind: str
    gz: bool
    columns: tuple[str, ...]
    rows: int
    names: InputColumns = DEFAULT_COLUMNS  # the columns holding the question, context, response, id

    @property
    def has_context(self) -> bool:
        return self.names.has_context(self.columns)


# ---------------------------------------------------------------- reading


def _open_text(path: Path, gz: bool, newline: str) -> io.TextIOBase:
    if gz:
        return gzip.open(path, "rt", encoding="utf-8-sig", newline=newline)  # type: ignore[return-value]
    return open(path, encoding="utf-8-sig", newline=newline)


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> GroundlensInputError:
    return GroundlensInputError(f"{path} is not UTF-8 text ({exc.reason}); re-save it as UTF-8")


def _check_path(path: Path) -> None:
    if path.is_dir():
        raise GroundlensInputError(f"{path} is a directory; give a .csv, .jsonl or .parquet file")
    if not path.exists():
        raise GroundlensInputError(f"input file not found: {path}")
    if not path.is_file():
        from groundlens_core.batch.outputs import special_kind

        kind = special_kind(path) or "not a regular file"
        raise GroundlensInputError(f"{path} is {kind}; give a .csv, .jsonl or .parquet file")


def scan_table(path: str | Path, names: InputColumns = DEFAULT_COLUMNS) -> TableInfo:
    """One cheap pass (no scoring): columns, row count and every whole-file problem, up front.

    ``names`` says which columns hold the question, context, response and id."""
    path = Path(path)
    _check_path(path)
    kind, gz = table_kind(path)
    try:
        if kind == "csv":
            columns, rows = _scan_csv(path, gz)
        elif kind == "jsonl":
            columns, rows = _scan_jsonl(path, gz)
        else:
            columns, rows = _scan_parquet(path)
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise GroundlensInputError(f"{path} is not a complete gzip file ({exc or 'truncated'})") from None
    dupes = sorted({c for c in columns if columns.count(c) > 1})
    if dupes:
        raise GroundlensInputError(
            f"{path}: duplicate column name(s) {', '.join(map(repr, dupes))} in the header; "
            "each column needs its own name"
        )
    names.require(columns, where=str(path))  # a question column is optional beside a context column
    return TableInfo(path=path, kind=kind, gz=gz, columns=tuple(columns), rows=rows, names=names)


def _csv_records(path: Path, fh: Any) -> Iterator[list[str]]:
    """The records of a CSV file, strictly: a quote that opens a cell and is never closed (the rest
    of the file would be read as one cell) or text after a closing quote (a stray quote closed by
    another far below) is a one-line error naming the line the record starts on, never a row that
    silently holds the rows after it."""
    reader = csv.reader(fh, strict=True)
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            end = reader.line_num
            what = (
                f"a quote opens a cell that is never closed (the {end - start + 1:,} lines to the end of the file "
                "would be one cell)"
                if "end of data" in str(exc)
                else f"a quoted cell goes on to line {end} and has text after its closing quote"
            )
            raise GroundlensInputError(
                f"{path}: line {start}: {what}; a stray double quote? Quote a cell that holds one whole "
                'and double each quote inside it ("")'
            ) from None
        yield cells


def _scan_csv(path: Path, gz: bool) -> tuple[list[str], int]:
    with _open_text(path, gz, "") as fh:
        records = _csv_records(path, fh)
        header = next(records, None) or []
        n = sum(1 for row in records if row)  # blank lines are not rows (as csv.DictReader)
    return list(header), n


def _scan_jsonl(path: Path, gz: bool) -> tuple[list[str], int]:
    columns: dict[str, None] = {}
    n = 0
    with _open_text(path, gz, "\n") as fh:  # split on \n only: U+2028, \x0c ... may sit inside values
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json_input.loads(line, name=f"{path}:{lineno}")
            if not isinstance(row, dict):
                raise GroundlensInputError(f"{path}:{lineno}: each line must be a JSON object")
            columns.update(dict.fromkeys(row))
            n += 1
    return list(columns), n


def _scan_parquet(path: Path) -> tuple[list[str], int]:
    _pyarrow()
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError on a broken file
        raise GroundlensInputError(f"{path} is not a readable Parquet file ({exc})") from None
    return list(pf.schema_arrow.names), pf.metadata.num_rows


def iter_rows(info: TableInfo, *, skip: int = 0) -> Iterator[dict[str, Any]]:
    """The rows of a scanned file as dicts, lazily, after the first ``skip`` rows."""
    try:
        if info.kind == "csv":
            yield from _iter_csv(info, skip)
        elif info.kind == "jsonl":
            yield from _iter_jsonl(info, skip)
        else:
            yield from _iter_parquet(info, skip)
    except UnicodeDecodeError as exc:
        raise _not_utf8(info.path, exc) from None


def _iter_csv(info: TableInfo, skip: int) -> Iterator[dict[str, Any]]:
    header = list(info.columns)
    width = len(header)
    with _open_text(info.path, info.gz, "") as fh:
        reader = _csv_records(info.path, fh)
        next(reader, None)
        n = 0
        for cells in reader:
            if not cells:
                continue
            n += 1
            if n <= skip:
                continue
            row: dict[str, Any] = dict(zip(header, cells))
            if len(cells) < width:
                row.update(dict.fromkeys(header[len(cells) :]))  # missing cells: empty (as csv.DictReader)
            elif len(cells) > width:
                extra = cells[width:]
                shown = ", ".join(repr(c[:30]) for c in extra[:3]) + (", ..." if len(extra) > 3 else "")
                row[READ_ERROR] = (
                    f"row {n} has {len(cells)} fields but the header has {width} "
                    f"(an unquoted comma?); extra fields not kept: {shown}"
                )
            yield row


def _iter_jsonl(info: TableInfo, skip: int) -> Iterator[dict[str, Any]]:
    n = 0
    with _open_text(info.path, info.gz, "\n") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            n += 1
            if n <= skip:
                continue
            yield json_input.loads(line, name=f"{info.path}:{lineno}")


def _iter_parquet(info: TableInfo, skip: int) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(info.path)
    seen = 0
    for g in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if seen + n <= skip:
            seen += n
            continue
        table = pf.read_row_group(g)
        start = max(0, skip - seen)
        seen += n
        for b in table.slice(start).to_batches(max_chunksize=1024):
            yield from b.to_pylist()


def row_item(row: Mapping[str, Any], has_context: bool, names: InputColumns = DEFAULT_COLUMNS) -> dict[str, Any]:
    """The (question, response, context) of a table row; an empty context cell means "no context"."""
    return names.item(row, has_context)


def renamed_inputs(input_columns: Sequence[str]) -> dict[str, str]:
    """The input columns that have the name of one of ours (a file scored before, a column of its
    own named ``groundlens_triage``), each with the name it is written under: ``input_`` before its
    name, once more for each time that name is taken too. Nothing of the input is replaced."""
    taken = set(input_columns) | set(OUT_COLUMNS)
    out: dict[str, str] = {}
    for c in input_columns:
        if c in OUT_COLUMNS:
            new = f"input_{c}"
            while new in taken:
                new = f"input_{new}"
            taken.add(new)
            out[c] = new
    return out


def output_columns(input_columns: Sequence[str]) -> list[str]:
    """Input columns (one named as one of ours under another name, see :func:`renamed_inputs`), then ours."""
    renamed = renamed_inputs(input_columns)
    return [renamed.get(c, c) for c in input_columns] + list(OUT_COLUMNS)


# ---------------------------------------------------------------- writing


def _csv_cell(value: Any) -> Any:
    """A cell as CSV text. A nested JSONL value (object or list; a Parquet list or struct) is written
    as JSON text, as the Parquet writer does, not as a Python repr (``{'a': 1}``) no JSON reader takes."""
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value


#: what a spreadsheet takes as the start of a formula (OWASP, "CSV Injection")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: our columns whose text quotes the response or the row (the others hold numbers or fixed words)
_OUR_TEXT_COLUMNS = frozenset(c for c in OUT_COLUMNS if OUT_COLUMN_TYPES.get(c, "string") == "string")


def formula_safe(value: Any) -> Any:
    """A text that a spreadsheet would run as a formula (``=HYPERLINK(...)``, ``+``, ``-``, ``@``,
    or a tab or carriage return first) with a single quote before it, as OWASP recommends: shown
    as text, never run. Anything else as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def encode_rows(kind: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[bytes]:
    """Each row as the exact bytes it takes in a CSV or JSONL file (so a row can be copied by offset).

    In a CSV, our own text columns (the weakest sentence, the unsupported words, the facts, the
    error) go through :func:`formula_safe`: they quote the response, which may be written to make
    a spreadsheet run it. The input's own columns are written as the input had them."""
    out = []
    if kind == "csv":
        buf = io.StringIO(newline="")
        w = csv.writer(buf)
        for r in rows:
            w.writerow([_csv_cell(formula_safe(r.get(k)) if k in _OUR_TEXT_COLUMNS else r.get(k)) for k in columns])
            out.append(buf.getvalue().encode("utf-8", "backslashreplace"))
            buf.seek(0)
            buf.truncate()
    else:
        for r in rows:
            d = {k: r.get(k) for k in columns}
            try:
                line = json.dumps(d, ensure_ascii=False, default=str, allow_nan=False)
            except ValueError:  # NaN/Infinity (a Parquet float column): not JSON; written as null
                line = json.dumps(_finite(d), ensure_ascii=False, default=str)
            out.append((line + "\n").encode("utf-8", "backslashreplace"))
    return out


def _finite(value: Any) -> Any:
    """``value`` with every NaN/Infinity float replaced by None (JSON has no such numbers; a JSONL
    line holding ``NaN`` is rejected by strict readers: jq, JavaScript, Go, Spark)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def csv_header(columns: Sequence[str]) -> bytes:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerow(list(columns))
    return buf.getvalue().encode("utf-8")


def arrow_schema(info: TableInfo, columns: Sequence[str]):
    """The output schema: a Parquet input keeps its column types; CSV/JSONL columns are text; ours are typed."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    given = pq.ParquetFile(info.path).schema_arrow if info.kind == "parquet" else None
    types = {"string": pa.string(), "float64": pa.float64(), "bool": pa.bool_()}
    source = {new: old for old, new in renamed_inputs(info.columns).items()}
    fields = []
    for c in columns:
        if c in OUT_COLUMNS:
            fields.append(pa.field(c, types[OUT_COLUMN_TYPES.get(c, "string")]))
        elif given is not None and source.get(c, c) in given.names:
            fields.append(given.field(source.get(c, c)).with_name(c))
        else:
            fields.append(pa.field(c, pa.string()))
    return pa.schema(fields)


def arrow_table(rows: Sequence[Mapping[str, Any]], schema):
    """A chunk of rows as an Arrow table of ``schema``; JSONL values that are not text are kept as JSON text."""
    import pyarrow as pa

    text_cols = [f.name for f in schema if pa.types.is_string(f.type) and f.name not in OUT_COLUMNS]
    fixed = []
    for r in rows:
        d = {k: r.get(k) for k in schema.names}
        for c in text_cols:
            v = d[c]
            if v is not None and not isinstance(v, str):
                d[c] = (
                    None if isinstance(v, float) and math.isnan(v) else json.dumps(v, ensure_ascii=False, default=str)
                )
        fixed.append(d)
    try:
        return pa.Table.from_pylist(fixed, schema=schema)
    except UnicodeEncodeError:  # a lone surrogate (an undecodable byte of the input): written escaped,
        # as the CSV and JSONL writers write it, not refused; only a chunk that holds one pays for this
        strings = [f.name for f in schema if pa.types.is_string(f.type)]
        for d in fixed:
            for c in strings:
                value = d[c]
                if isinstance(value, str):
                    d[c] = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return pa.Table.from_pylist(fixed, schema=schema)
