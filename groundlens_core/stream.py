"""Scoring that streams: a lazy Python API, and the resumable file job behind ``groundlens evaluate``.

Why: a day of production traffic is millions of rows. Reading it whole makes memory grow with the
file, and writing only at the end loses everything when the run dies at 90 %. Here a run holds the
model, one chunk and its output buffer; every finished chunk is on disk (fsync'd) with a checkpoint
beside it, and the target file appears only when the run is complete (a rename of the temporary
file beside it). ``resume=True`` continues from the last checkpoint and produces the same bytes as
an uninterrupted run: scores are batch invariant (the packed backend), rows are written in input
order, and the checkpoint pins everything that could change a byte (the input's SHA-256, columns,
chunk size, options, embedder, version).

A resume proves what it continues before anything is scored: the checkpoint records the length
and SHA-256 of the rows written so far and of their keys, and the files on disk must match them.
A damaged, edited or missing piece, or a malformed checkpoint, is a one-line refusal that names
the file; a run without ``--resume`` then starts over. One run writes an output at a time: a lock
file beside it (held with ``flock``, so a killed run never leaves it blocking) names the process
that holds it.

Files beside the target ``out.csv`` while a run is going (all removed when it completes):
``.out.csv.groundlens-partial`` (the rows so far; a folder of Arrow parts for Parquet),
``….keys`` (per row: byte offset, band, method, normalized score: 18 bytes, what ``--sort`` and
the HTML report's second pass read instead of holding rows in memory) and ``….json`` (the checkpoint);
and ``.out.csv.groundlens-lock`` (the lock, removed when the run ends).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from groundlens_core.columns import METHOD_CODES, RISK_RANK, result_columns, risk_key
from groundlens_core.errors import GroundlensInputError
from groundlens_core.outputs import OutputLock, adopt_attributes, check_target, replacing, same_file, with_path
from groundlens_core.results import GroundlensScore, ScoreError

#: rows the HTML report of a big batch shows (the riskiest); its summary counts every row
DEFAULT_HTML_ROWS = 1000
#: per-row record of the keys file (see the module docstring)
KEY_DTYPE = np.dtype([("offset", "<i8"), ("rank", "i1"), ("method", "i1"), ("norm", "<f8")])
CHECKPOINT_FORMAT = "groundlens-evaluate-checkpoint/2"
_HASH_BLOCK = 1 << 20


# ---------------------------------------------------------------- the Python API


def score_chunk(
    items: Sequence[Any],
    *,
    start: int = 0,
    embedder=None,
    calibration=None,
    long_context: str = "mean",
    errors: str = "record",
) -> list[GroundlensScore | ScoreError]:
    """``evaluate_batch`` on one chunk, with error indices counted from ``start`` (the chunk's first row)."""
    from groundlens_core.scoring import evaluate_batch

    results = evaluate_batch(
        items,
        embedder=embedder,
        calibration=calibration,
        long_context=long_context,
        errors=errors,
        chunk_size=max(1, len(items)),
    )
    return [dataclasses.replace(r, index=r.index + start) if isinstance(r, ScoreError) else r for r in results]


def evaluate_stream(
    rows: Iterable[Any],
    *,
    batch_size: int = 256,
    embedder=None,
    calibration=None,
    long_context: str = "mean",
    errors: str = "record",
) -> Iterator[GroundlensScore | ScoreError]:
    """Score an iterable of any length lazily, yielding one result per row in input order.

    Rows are what :func:`~groundlens_core.scoring.evaluate_batch` takes (mappings with ``question``,
    ``response``, optional ``context``, or tuples). Only ``batch_size`` rows are held at a time; the
    unique texts of a chunk are embedded together. A bad row yields a :class:`ScoreError` whose
    ``index`` is its position in the whole stream, and every other row is scored (``errors="raise"``
    raises on the first bad row instead). Results are byte-identical to ``evaluate_batch`` on the same
    rows, whatever ``batch_size``.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise GroundlensInputError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
    if errors not in ("record", "raise"):
        raise ValueError("errors must be 'record' or 'raise'")
    from groundlens_core.calibration import CalibrationResult
    from groundlens_core.scoring import get_default_embedder

    emb = embedder or get_default_embedder()
    if calibration is not None and not isinstance(calibration, CalibrationResult):
        calibration = CalibrationResult.load(calibration)  # once, not once per chunk
    it = iter(rows)
    start = 0
    while True:
        chunk = list(islice(it, batch_size))
        if not chunk:
            return
        yield from score_chunk(
            chunk, start=start, embedder=emb, calibration=calibration, long_context=long_context, errors=errors
        )
        start += len(chunk)


# ---------------------------------------------------------------- the file job


@dataclass(frozen=True)
class EvaluateJob:
    """Everything ``groundlens evaluate`` was asked to do."""

    input: Path
    output: Path
    sort: bool = False
    html: Path | None = None
    html_rows: int = DEFAULT_HTML_ROWS
    batch_size: int = 256
    calibration: Any = None  # a path or CalibrationResult
    long_context: str = "mean"
    resume: bool = False
    progress: bool | None = None  # None: when stderr is a terminal
    engine: str = "local"  # "local" | "ray"
    address: str | None = None
    workers: int | None = None
    threads: int | None = None
    ledger: Any = None  # a groundlens_core.ledger.Ledger: one signed decision record per row
    keep_columns: tuple[str, ...] = ()  # input columns the HTML report shows with each row (``id`` always)
    group_by: str | None = None  # the input column the HTML report's nodes are (default ``node``)


@dataclass
class JobSummary:
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    methods: dict[str, int] = field(default_factory=dict)
    resumed_from: int = 0
    html_rows: int = 0


@dataclass(frozen=True)
class _Paths:
    partial: Path
    keys: Path
    checkpoint: Path
    lock: Path

    @classmethod
    def beside(cls, output: Path) -> _Paths:
        base = output.parent / f".{output.name}.groundlens-partial"
        return cls(
            partial=base,
            keys=Path(f"{base}.keys"),
            checkpoint=Path(f"{base}.json"),
            lock=output.parent / f".{output.name}.groundlens-lock",
        )

    def remove(self) -> None:
        for p in (self.keys, self.checkpoint):
            p.unlink(missing_ok=True)
        if self.partial.is_dir():
            shutil.rmtree(self.partial, ignore_errors=True)
        else:
            self.partial.unlink(missing_ok=True)


def _fsync(fh) -> None:
    fh.flush()
    os.fsync(fh.fileno())


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, sort_keys=True)
            _fsync(fh)
        os.replace(tmp, path)
    except OSError as exc:
        raise with_path(exc, path) from None


class _Sink:
    """Where the scored rows go while a run is going: append, fsync, truncate back on resume.

    It keeps a running SHA-256 of everything written to the partial output and to the keys file;
    :meth:`state` is what the checkpoint records and :func:`_verify_resume` checks."""

    def __init__(self, kind: str, paths: _Paths, columns: list[str], schema: Any):
        self.kind, self.paths, self.columns, self.schema = kind, paths, columns, schema
        self.fh = None
        self.parts = 0
        self.bytes = 0
        self.digest = hashlib.sha256()
        self.keys_digest = hashlib.sha256()

    def open(self, *, rows_done: int, state: dict | None, verified: _Verified | None = None) -> None:
        from groundlens_core.io_formats import csv_header

        p = self.paths
        if state is not None and verified is not None:
            self.digest, self.keys_digest = verified.digest, verified.keys_digest
            self.bytes = int(state["bytes"])
        if self.kind == "parquet":
            if state is None:
                if p.partial.exists():
                    shutil.rmtree(p.partial) if p.partial.is_dir() else p.partial.unlink()
                p.partial.mkdir()
            else:
                self.parts = int(state["parts"])
                for part in p.partial.glob("part-*.arrow"):
                    if int(part.stem.split("-")[1]) >= self.parts:
                        part.unlink()  # written after the last checkpoint
        else:
            if state is None:
                if p.partial.is_dir():
                    shutil.rmtree(p.partial)
                self.fh = open(p.partial, "wb")  # type: ignore[assignment]
                if self.kind == "csv":
                    header = csv_header(self.columns)
                    self.fh.write(header)  # type: ignore[attr-defined]
                    self.digest.update(header)
            else:
                self.fh = open(p.partial, "r+b")  # type: ignore[assignment]
                self.fh.truncate(int(state["bytes"]))  # type: ignore[attr-defined]  # drop a chunk written after the last checkpoint
                self.fh.seek(0, os.SEEK_END)  # type: ignore[attr-defined]
            self.bytes = self.fh.tell()  # type: ignore[attr-defined]
        mode = "wb" if state is None else "r+b"
        if state is None:
            p.keys.unlink(missing_ok=True)
        self.keys = open(p.keys, mode)
        self.keys.truncate(rows_done * KEY_DTYPE.itemsize)
        self.keys.seek(0, os.SEEK_END)

    def write(self, rows: list[dict], first_row: int) -> None:
        from groundlens_core.io_formats import arrow_table, encode_rows

        keys = np.zeros(len(rows), dtype=KEY_DTYPE)
        for i, r in enumerate(rows):
            keys[i]["rank"], keys[i]["norm"] = risk_key(r)
            keys[i]["method"] = METHOD_CODES.get(r.get("groundlens_method"), -1)  # type: ignore[arg-type]
        if self.kind == "parquet":
            import pyarrow as pa

            keys["offset"] = np.arange(first_row, first_row + len(rows))
            buf = pa.BufferOutputStream()
            with pa.ipc.new_file(buf, self.schema) as w:
                w.write_table(arrow_table(rows, self.schema))
            data = buf.getvalue().to_pybytes()
            part = self.paths.partial / f"part-{self.parts:07d}.arrow"
            with open(part, "wb") as fh:
                fh.write(data)
                _fsync(fh)
            self.digest.update(data)
            self.bytes += len(data)
            self.parts += 1
        else:
            blobs = encode_rows(self.kind, rows, self.columns)
            offsets = np.cumsum([0] + [len(b) for b in blobs[:-1]], dtype=np.int64) + self.bytes
            keys["offset"] = offsets
            data = b"".join(blobs)
            self.fh.write(data)  # type: ignore[attr-defined]
            _fsync(self.fh)
            self.digest.update(data)
            self.bytes = self.fh.tell()  # type: ignore[attr-defined]
        key_bytes = keys.tobytes()
        self.keys.write(key_bytes)
        _fsync(self.keys)
        self.keys_digest.update(key_bytes)

    def state(self) -> dict:
        out: dict[str, Any] = {
            "bytes": self.bytes,
            "partial_sha256": self.digest.hexdigest(),
            "keys_sha256": self.keys_digest.hexdigest(),
        }
        if self.kind == "parquet":
            out["parts"] = self.parts
        return out

    def close(self) -> None:
        for fh in (self.fh, getattr(self, "keys", None)):
            if fh is not None:
                try:
                    fh.close()
                except OSError:  # a write that failed is reported by the write; what was checkpointed is synced
                    pass


# ---------------------------------------------------------------- checkpoint checks


class _Unresumable(Exception):
    """Why a checkpoint (or what it describes) cannot be continued; the text follows the file's name."""


@dataclass(frozen=True)
class _Verified:
    """The running digests of a partial output and its keys, as the checks left them: the resumed
    run appends to these, so the next checkpoint covers the whole file again."""

    digest: Any
    keys_digest: Any


_CHECKPOINT_FIELDS: dict[str, type] = {
    "format": str,
    "signature": dict,
    "rows_done": int,
    "bytes": int,
    "partial_sha256": str,
    "keys_sha256": str,
}


def _read_checkpoint(path: Path, out_kind: str) -> dict:
    """The checkpoint at ``path``, or :class:`_Unresumable` naming it and what is wrong with it."""
    try:
        return _checked_checkpoint(path, out_kind)
    except _Unresumable as exc:
        raise _Unresumable(f"{path} {exc}") from None


def _checked_checkpoint(path: Path, out_kind: str) -> dict:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _Unresumable(f"cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _Unresumable("is not valid JSON (damaged or cut short)") from None
    if not isinstance(saved, dict):
        raise _Unresumable(f"is not a checkpoint (a JSON {type(saved).__name__}, not an object)")
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise _Unresumable(f"is not a checkpoint this version can resume (format {saved.get('format')!r})")
    fields = dict(_CHECKPOINT_FIELDS, **({"parts": int} if out_kind == "parquet" else {}))
    for name, kind in fields.items():
        if name not in saved:
            raise _Unresumable(f"has no {name!r}")
        value = saved[name]
        if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise _Unresumable(f"has a malformed {name!r} ({value!r})")
    rows = saved["signature"].get("rows")
    if not isinstance(rows, int) or saved["rows_done"] > rows:
        raise _Unresumable(f"says {saved['rows_done']:,} rows were done of {rows!r}")
    return saved


def _hash_prefix(path: Path, size: int, digest: Any) -> Any:
    """``digest`` updated with the first ``size`` bytes of ``path`` (which must have them)."""
    left = size
    with open(path, "rb") as fh:
        while left > 0:
            block = fh.read(min(_HASH_BLOCK, left))
            if not block:
                raise _Unresumable(f"is shorter than its checkpoint says ({size - left:,} of {size:,} bytes)")
            digest.update(block)
            left -= len(block)
    return digest


def _verify_resume(out_kind: str, partial: Path, paths: _Paths, state: dict, header: bytes) -> _Verified:
    """Check the written rows and their keys against the checkpoint: lengths, SHA-256 digests and
    that the keys' offsets describe ``rows_done`` rows of the partial output. Raises
    :class:`_Unresumable` naming the first file that does not match."""
    rows_done, size = int(state["rows_done"]), int(state["bytes"])
    # the partial output
    try:
        if out_kind == "parquet":
            if not partial.is_dir():
                raise _Unresumable("is not the folder of Arrow parts this run writes")
            digest = hashlib.sha256()
            total = 0
            for k in range(int(state["parts"])):
                part = partial / f"part-{k:07d}.arrow"
                if not part.is_file():
                    raise _Unresumable(f"has lost {part.name}")
                n = part.stat().st_size
                _hash_prefix(part, n, digest)
                total += n
            if total != size:
                raise _Unresumable(f"holds {total:,} bytes of rows where the checkpoint says {size:,}")
        else:
            if not partial.is_file():
                raise _Unresumable("is not a file")
            have = partial.stat().st_size
            if have < size:
                raise _Unresumable(f"is shorter than its checkpoint says ({have:,} of {size:,} bytes)")
            digest = _hash_prefix(partial, size, hashlib.sha256())
        if digest.hexdigest() != state["partial_sha256"]:
            raise _Unresumable("does not match its checkpoint (SHA-256 of the rows written; changed or damaged)")
    except (_Unresumable, OSError) as exc:
        raise _blame(partial, exc) from None
    # the keys
    try:
        want = rows_done * KEY_DTYPE.itemsize
        have = paths.keys.stat().st_size if paths.keys.is_file() else -1
        if have < want:
            raise _Unresumable(
                "is missing" if have < 0 else f"is shorter than its checkpoint says ({have:,} of {want:,} bytes)"
            )
        keys_digest = _hash_prefix(paths.keys, want, hashlib.sha256())
        if keys_digest.hexdigest() != state["keys_sha256"]:
            raise _Unresumable(
                "does not match its checkpoint (SHA-256 of the first rows_done rows' keys; changed or damaged, "
                "or rows_done was edited)"
            )
        offsets = np.fromfile(paths.keys, dtype=KEY_DTYPE, count=rows_done)["offset"]
        if out_kind == "parquet":
            ok = bool(np.array_equal(offsets, np.arange(rows_done)))
        else:
            ok = rows_done == 0 or (
                int(offsets[0]) == len(header) and bool(np.all(np.diff(offsets) > 0)) and int(offsets[-1]) < size
            )
        if not ok:
            raise _Unresumable(f"does not describe {rows_done:,} rows of {partial.name}")
    except (_Unresumable, OSError) as exc:
        raise _blame(paths.keys, exc) from None
    return _Verified(digest=digest, keys_digest=keys_digest)


def _blame(path: Path, exc: BaseException) -> _Unresumable:
    why = str(exc) if isinstance(exc, _Unresumable) else f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    return _Unresumable(f"{path} {why}")


def _signature(job: EvaluateJob, info, out_kind: str, emb, cal) -> dict:
    from groundlens_core._version import __version__

    return {
        "input": str(job.input.resolve()),
        "input_size": job.input.stat().st_size,
        "input_sha256": _file_sha256(job.input),
        "columns": list(info.columns),
        "rows": info.rows,
        "output_kind": out_kind,
        "batch_size": job.batch_size,
        "long_context": job.long_context,
        "calibration": None if cal is None else cal.direction_id,
        "fingerprint": emb.fingerprint,
        "backend": emb.backend,
        "version": __version__,
    }


def _file_sha256(path: Path) -> str:
    """The input's identity for a resume: its content, not its size and modification time (an
    edit that keeps both would otherwise be continued silently). Hashing runs at about 1.7 GB/s,
    a fraction of the pass that counts the rows."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _load_calibration(value: Any):
    from groundlens_core.calibration import CalibrationResult

    if value is None or isinstance(value, CalibrationResult):
        return value
    path = Path(value)
    if not path.is_file():
        raise GroundlensInputError(f"calibration file not found: {path}")
    return CalibrationResult.load(path)


def _progress_bar(total: int, initial: int, enabled: bool | None):
    from tqdm import tqdm

    enabled = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(
        total=total,
        initial=initial,
        unit="rows",
        desc="groundlens evaluate",
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        smoothing=0.1,
        mininterval=0.5,
    )


def run_evaluate(job: EvaluateJob, *, log: Callable[[str], None] | None = None) -> JobSummary:
    """Score ``job.input`` into ``job.output`` in chunks; see the module docstring for the guarantees."""
    from groundlens_core.io_formats import arrow_schema, output_columns, scan_table, table_kind

    log = log or (lambda msg: print(msg, file=sys.stderr))
    # every check that can fail does so before the model loads or a row is scored
    out_kind, _ = table_kind(job.output, output=True)
    if same_file(job.input, job.output):
        raise GroundlensInputError(
            f"the output {job.output} is the input file; write to another file (the input is never overwritten)"
        )
    if job.html is not None:
        for data, name in ((job.input, "the input"), (job.output, "the output")):
            if same_file(job.html, data):
                raise GroundlensInputError(
                    f"the HTML report {job.html} is {name} file {data}; write the report to another file"
                )
        if table_kind_or_none(job.html) is not None:
            raise GroundlensInputError(f"the HTML report {job.html} would overwrite a data file; give it an .html name")
        check_target(job.html, what="the HTML report")
    info = scan_table(job.input)
    check_target(job.output, what="the output", inputs=[job.input])
    cal = _load_calibration(job.calibration)
    columns = output_columns(info.columns)
    schema = arrow_schema(info, columns) if out_kind == "parquet" else None
    paths = _Paths.beside(job.output)
    lock = OutputLock.acquire(paths.lock, job.output)
    try:
        return _run_locked(job, info, out_kind, columns, schema, cal, paths, log)
    finally:
        lock.release()


def _resume_state(job: EvaluateJob, info, out_kind: str, columns: list[str], paths: _Paths, signature: dict, log):
    """The checkpoint to continue and the checked digests of what it describes, or ``(None, None)``
    for a fresh start. Refuses in one line what cannot be continued; a leftover that cannot be
    resumed never blocks a run without ``--resume`` (it is replaced, with a note)."""
    from groundlens_core.io_formats import csv_header

    if not paths.checkpoint.exists():
        if job.resume:
            log("note: nothing to resume for this output; starting from the first row")
        return None, None
    header = csv_header(columns) if out_kind == "csv" else b""
    saved = verified = None
    renamed = False
    try:
        saved = _read_checkpoint(paths.checkpoint, out_kind)
        renamed = not paths.partial.exists() and _renamed_output_matches(paths, job.output, saved)
        if not paths.partial.exists() and not renamed:
            raise _Unresumable(f"the partial output {paths.partial} of the interrupted run is gone")
        verified = _verify_resume(out_kind, job.output if renamed else paths.partial, paths, saved, header)
        problem = None
    except _Unresumable as exc:
        problem = str(exc)
    if not job.resume:
        if saved is not None and problem is None:
            raise GroundlensInputError(
                f"an interrupted run of this output left {paths.partial.name} ({saved['rows_done']:,} of "
                f"{saved['signature']['rows']:,} rows done) beside {job.output}: "
                "add --resume to continue it, "
                f"or delete {paths.partial} and {paths.checkpoint.name} to start over"
            )
        log(
            f"note: replacing what an earlier run left, which cannot be resumed ({problem}); "
            "starting from the first row"
        )
        paths.remove()
        return None, None
    if saved is None or problem is not None:
        raise GroundlensInputError(f"cannot resume: {problem}; run again without --resume to start over")
    diff = [k for k in signature if saved["signature"].get(k) != signature[k]]
    if diff:
        raise GroundlensInputError(
            f"cannot resume: {', '.join(diff)} changed since the interrupted run "
            "(the output would not match an "
            f"uninterrupted run); delete {paths.partial} and {paths.checkpoint.name} to start over"
        )
    if renamed:
        os.replace(job.output, paths.partial)  # checked: the output is exactly the partial
    return saved, verified


def _run_locked(job: EvaluateJob, info, out_kind, columns, schema, cal, paths: _Paths, log) -> JobSummary:
    from groundlens_core.io_formats import READ_ERROR, row_item
    from groundlens_core.scoring import get_default_embedder

    emb = get_default_embedder()
    signature = _signature(job, info, out_kind, emb, cal)
    state, verified = _resume_state(job, info, out_kind, columns, paths, signature, log)
    rows_done = int(state["rows_done"]) if state else 0
    summary = JobSummary(rows=info.rows, resumed_from=rows_done)
    if state:
        log(f"resuming after row {rows_done:,} of {info.rows:,}")

    # the engine starts (Ray: installed? cluster reachable?) before any file of the run is made, so a
    # run that cannot start leaves nothing that would ask the next run for --resume
    scorer = _make_scorer(job, emb, cal, info)
    sink = _Sink(out_kind, paths, columns, schema)
    bar = None
    try:
        sink.open(rows_done=rows_done, state=state, verified=verified)
        if state is None:
            _write_json_atomic(
                paths.checkpoint, {"format": CHECKPOINT_FORMAT, "signature": signature, "rows_done": 0, **sink.state()}
            )
        bar = _progress_bar(info.rows, rows_done, job.progress)
        rows_iter = iter_rows_checked(info, rows_done)
        chunk_rows = scorer.chunk_rows
        while True:
            rows = list(islice(rows_iter, chunk_rows))
            if not rows:
                break
            results: list[Any] = [None] * len(rows)
            todo = [i for i, r in enumerate(rows) if READ_ERROR not in r]
            for i, r in enumerate(rows):
                if READ_ERROR in r:
                    results[i] = ScoreError(index=rows_done + i, error=r.pop(READ_ERROR))
            for i, res in zip(todo, scorer.score([row_item(rows[i], info.has_context) for i in todo], rows_done)):
                results[i] = res
            if job.ledger is not None:  # signed records of the rows, before the checkpoint counts them done
                job.ledger.record_rows([row_item(r, info.has_context) for r in rows], results, rows_done, signature)
            out = []
            for r, res in zip(rows, results):
                o = dict(r)
                o.update(res if isinstance(res, dict) else result_columns(res))  # Ray sends the cells
                out.append(o)
            # write in checkpoint-sized pieces so a resume never has to redo more than one chunk
            for s in range(0, len(out), job.batch_size):
                piece = out[s : s + job.batch_size]
                sink.write(piece, rows_done)
                rows_done += len(piece)
                _write_json_atomic(
                    paths.checkpoint,
                    {"format": CHECKPOINT_FORMAT, "signature": signature, "rows_done": rows_done, **sink.state()},
                )
            bar.update(len(rows))
    except OSError as exc:
        raise (exc if exc.filename else with_path(exc, paths.partial)) from None
    finally:
        if bar is not None:
            bar.close()
        sink.close()
        scorer.close()

    keys = np.fromfile(paths.keys, dtype=KEY_DTYPE) if paths.keys.stat().st_size else np.zeros(0, KEY_DTYPE)
    if len(keys) != info.rows:
        raise GroundlensInputError(
            f"{job.input} changed while it was being scored ({len(keys)} rows written, {info.rows} scanned)"
        )
    bands = {v: k for k, v in RISK_RANK.items()}
    for rank, n in zip(*np.unique(keys["rank"], return_counts=True)):
        summary.counts[bands.get(int(rank), "other")] = int(n)
    codes = {v: k for k, v in METHOD_CODES.items()}
    for code, n in zip(*np.unique(keys["method"], return_counts=True)):
        summary.methods[codes.get(int(code), "other")] = int(n)
    if job.html is not None:
        from groundlens_core.report_batch import write_batch_html

        summary.html_rows = write_batch_html(job, info, out_kind, paths, keys, schema, emb=emb, calibration=cal)
    order = _risk_order(keys) if job.sort else None
    _finalize(out_kind, paths, job.output, columns, schema, keys, order)
    paths.remove()
    return summary


def _renamed_output_matches(paths: _Paths, output: Path, state: dict) -> bool:
    """A run stopped after renaming its complete CSV/JSONL into place but before removing its
    checkpoint left the checkpoint and keys without a partial. The output is then exactly the
    partial (same bytes, so the keys' offsets hold): a resume checks it as the partial, moves it
    back and finishes as any other (the second pass, ``--sort`` and ``--html``, then the clean-up)."""
    rows = state["signature"]["rows"]
    return (
        state["rows_done"] == rows
        and "parts" not in state
        and output.is_file()
        and output.stat().st_size == state["bytes"]
        and paths.keys.is_file()
        and paths.keys.stat().st_size == rows * KEY_DTYPE.itemsize
    )


def table_kind_or_none(path: Path) -> str | None:
    from groundlens_core.io_formats import table_kind

    try:
        return table_kind(path)[0]
    except GroundlensInputError:
        return None


def iter_rows_checked(info, skip: int) -> Iterator[dict]:
    from groundlens_core.io_formats import iter_rows

    return iter_rows(info, skip=skip)


def _risk_order(keys: np.ndarray) -> np.ndarray:
    """Row indices riskiest first: band, lowest normalized score, then input order (a stable sort)."""
    return np.lexsort((np.arange(len(keys)), keys["norm"], keys["rank"]))


# ---------------------------------------------------------------- scoring engines


class _LocalScorer:
    """Scores in this process, one chunk at a time."""

    def __init__(self, job: EvaluateJob, emb, cal):
        self.job, self.emb, self.cal = job, emb, cal
        self.chunk_rows = job.batch_size

    def score(self, items: list[dict], start: int) -> list:
        from groundlens_core.threads import scoring_threads

        with scoring_threads(self.job.threads):  # encode lanes of one torch thread each
            return score_chunk(
                items, start=start, embedder=self.emb, calibration=self.cal, long_context=self.job.long_context
            )

    def close(self) -> None:
        pass


def _make_scorer(job: EvaluateJob, emb, cal, info):
    if job.engine == "ray":
        from groundlens_core.distributed import RayChunkScorer

        return RayChunkScorer(job, cal)
    return _LocalScorer(job, emb, cal)


# ---------------------------------------------------------------- second pass: final file


def read_rows_at(
    out_kind: str, paths: _Paths, keys: np.ndarray, indices: Sequence[int], columns: list[str], schema=None
) -> list[dict]:
    """The written rows at ``indices`` (in that order), read back by offset: the second pass never
    holds more rows than it was asked for."""
    if out_kind == "parquet":
        tables = _arrow_rows(paths, keys, indices)
        return tables.to_pylist() if tables is not None else []
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
                out.append(dict(zip(columns, cells)))
            else:
                out.append(json.loads(blob))
    return out


def _row_ends(paths: _Paths, keys: np.ndarray) -> np.ndarray:
    ends = np.empty(len(keys), dtype=np.int64)
    if len(keys):
        ends[:-1] = keys["offset"][1:]
        ends[-1] = paths.partial.stat().st_size
    return ends


def _part_rows(paths: _Paths) -> list[tuple[Path, int, int]]:
    """(part file, first row, rows) of each Arrow part, in order."""
    import pyarrow as pa

    out, first = [], 0
    for part in sorted(paths.partial.glob("part-*.arrow")):
        with pa.memory_map(str(part)) as src:
            n = pa.ipc.open_file(src).read_all().num_rows
        out.append((part, first, n))
        first += n
    return out


def _arrow_rows(paths: _Paths, keys: np.ndarray | None, indices: Sequence[int], parts: list | None = None):
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


def _finalize(
    out_kind: str, paths: _Paths, output: Path, columns: list[str], schema, keys: np.ndarray, order: np.ndarray | None
) -> None:
    """Put the complete output in place: a rename for CSV/JSONL in input order; otherwise a second
    pass into a temporary file beside the target, then a rename. Either way the output keeps the
    mode and group of the file it replaces (see :mod:`groundlens_core.outputs`)."""
    if out_kind != "parquet" and order is None:
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
    out_kind: str, paths: _Paths, tmp: Path, columns: list[str], keys: np.ndarray, order: np.ndarray
) -> None:
    from groundlens_core.io_formats import csv_header

    ends = _row_ends(paths, keys)
    with open(paths.partial, "rb") as src, open(tmp, "wb") as dst:
        if out_kind == "csv":
            dst.write(csv_header(columns))
        for i in order:
            src.seek(int(keys["offset"][i]))
            dst.write(src.read(int(ends[i] - keys["offset"][i])))
        _fsync(dst)


def _write_parquet(paths: _Paths, tmp: Path, schema, order: np.ndarray | None, rows_per_group: int = 16384) -> None:
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
    with open(tmp, "rb+") as fh:
        _fsync(fh)
