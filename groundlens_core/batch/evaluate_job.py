"""The resumable file job behind ``groundlens evaluate``: chunked read, score, write, checkpoint.

A run holds the model, one chunk and its output buffer; every finished chunk is on disk with a
checkpoint beside it (see :mod:`groundlens_core.batch.partial_output` and :mod:`groundlens_core.batch.checkpoint`),
and the target appears only when the run is complete. ``resume=True`` continues from the last
checkpoint and writes the same bytes as an uninterrupted run. One run writes an output at a time
(a ``flock``'d lock file beside it).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from groundlens_core import extensions
from groundlens_core.batch import chunks
from groundlens_core.batch.checkpoint import (
    Unresumable,
    read_checkpoint,
    renamed_output_matches,
    run_signature,
    verify_resume,
    write_checkpoint,
)
from groundlens_core.batch.columns import BAND_ORDER, METHOD_CODES, OUT_COLUMNS, result_columns
from groundlens_core.batch.final_output import finalize, risk_order
from groundlens_core.batch.input_columns import InputColumns
from groundlens_core.batch.outputs import OutputLock, check_html_target, check_target, same_file, with_path
from groundlens_core.batch.partial_output import KEY_DTYPE, PartialPaths, Sink, row_keys
from groundlens_core.batch.riskiest import RiskiestKeeper
from groundlens_core.errors import GroundlensInputError, printable
from groundlens_core.scoring.results import ScoreError

#: rows the HTML report of a big batch shows (the riskiest); its summary counts every row
DEFAULT_HTML_ROWS = 1000


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
    #: the columns holding the question, context, response and id: an InputColumns or a mapping
    #: ``{"question": "query", "response": "answer"}`` (roles not named keep their own names)
    columns: InputColumns | Mapping[str, str] | None = None


@dataclass
class JobSummary:
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    methods: dict[str, int] = field(default_factory=dict)
    resumed_from: int = 0
    html_rows: int = 0


def _load_calibration(value: Any):
    from groundlens_core.scoring.calibration import CalibrationResult

    if value is None or isinstance(value, CalibrationResult):
        return value
    return CalibrationResult.load(Path(value))


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
    from groundlens_core.batch.io_formats import arrow_schema, output_columns, scan_table, table_kind

    log = log or (lambda msg: print(printable(msg), file=sys.stderr))
    # every check that can fail does so before the model loads or a row is scored
    out_kind, _ = table_kind(job.output, output=True)
    if same_file(job.input, job.output):
        raise GroundlensInputError(
            f"the output {job.output} is the input file; write to another file (the input is never overwritten)"
        )
    PartialPaths.beside(job.output).refuse_links()  # a link planted there is named as such first
    check_own_files(job)
    if job.ledger is not None:
        job.ledger.check()  # its last line can be continued from
    write_report = _check_report(job, job.html) if job.html is not None else None
    info = scan_table(job.input, InputColumns.of(job.columns))
    _check_named_columns(job, info)  # the report's columns, known before any row is scored
    check_target(job.output, what="the output")  # the input was refused as the output above
    cal = _load_calibration(job.calibration)
    columns = output_columns(info.columns)
    schema = arrow_schema(info, columns) if out_kind == "parquet" else None
    paths = PartialPaths.beside(job.output)
    paths.refuse_links()
    lock = OutputLock.acquire(paths.lock, job.output)
    try:
        run = _Run(job, info, out_kind, columns, schema, cal, paths, log)
        return _run_locked(run, write_report)
    finally:
        lock.release()


@dataclass(frozen=True)
class _OwnFile:
    """One path a run is given or keeps: how a refusal names it, whether the run writes (or
    removes) it, and what a refusal naming it as the one at fault asks for."""

    path: Path
    name: str
    written: bool
    fix: str = "give it its own file"
    folder: bool = False  # the run removes it with everything inside it
    #: the run's own file beside the output: what is found there is removed or refused (a link,
    #: a hard link), never written through, so only its own path is ever the same file as another
    own: bool = False


def own_files(job: EvaluateJob) -> list[_OwnFile]:
    """Every path a run reads, writes or removes: what it was given and the files it keeps beside
    its output until it completes (the partial output, for Parquet a folder, is removed then with
    everything in it)."""
    out: list[_OwnFile] = []
    if job.ledger is not None:
        out.append(_OwnFile(job.ledger.path, f"the ledger {job.ledger.path}", True, "give the ledger its own file"))
    if job.html is not None:
        out.append(_OwnFile(job.html, f"the HTML report file {job.html}", True, "write the report to another file"))
    if isinstance(job.calibration, (str, os.PathLike)):
        out.append(_OwnFile(Path(job.calibration), f"the calibration file {job.calibration}", False))
    key_path = getattr(getattr(job.ledger, "writer", None), "key", None)
    key_path = getattr(key_path, "path", None)
    if key_path is not None:
        out.append(_OwnFile(Path(key_path), f"the signing key {key_path}", False))
    out.append(_OwnFile(job.input, f"the input file {job.input}", False))
    out.append(_OwnFile(job.output, f"the output file {job.output}", True))
    paths = PartialPaths.beside(job.output)
    for p, role in paths.roles():
        folder = role == "partial output"  # a folder of Arrow parts for Parquet
        out.append(_OwnFile(p, f"the {role} {p.name} of {job.output}", True, folder=folder, own=True))
    return out


def _inside(path: Path, folder: Path) -> bool:
    """True when ``path`` lies somewhere under ``folder`` (links resolved, neither needs to exist)."""
    try:
        return Path(folder).resolve() in Path(path).resolve().parents
    except (OSError, RuntimeError):
        return False


def _same_path(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def check_own_files(job: EvaluateJob) -> None:
    """Refuse, in one line and before any work, two paths of one run that are one file (a link
    too) or one inside the other where the run writes or removes either: a ledger or report in the
    partial folder of a Parquet output would be deleted with it when the run completes, a ledger
    that is the partial output would be written into the rows, an input there would be lost."""
    files = own_files(job)
    for i, a in enumerate(files):
        for b in files[i + 1 :]:
            if not (a.written or b.written):
                continue
            for first, second in ((a, b), (b, a)):
                if second.folder and _inside(first.path, second.path):
                    raise GroundlensInputError(
                        f"{first.name} is inside {second.name}, which the run removes when it completes; {first.fix}"
                    )
            if _same_path(a.path, b.path) if (a.own or b.own) else same_file(a.path, b.path):
                raise GroundlensInputError(f"{a.name} is {b.name}; {a.fix}")


def _check_named_columns(job: EvaluateJob, info: Any) -> None:
    """Every column named for the report (``--keep-columns``, ``--group-by``, an ``--id-col`` that
    was given) is one the input has: a typo is one line naming the closest column, never a report
    quietly without it. The default id column ``id`` may be absent (rows are then ``row <n>``)."""
    from groundlens_core.batch.input_columns import closest_column

    named = [("--keep-columns", c) for c in job.keep_columns]
    if job.group_by:
        named.append(("--group-by", job.group_by))
    given = job.columns
    if isinstance(given, Mapping):
        id_column = given.get("id")
    else:  # InputColumns (one naming its own id column) or None
        id_column = given.id if isinstance(given, InputColumns) and given.id != "id" else None
    if id_column is not None:
        named.append(("--id-col", id_column))
    for option, name in named:
        if name not in info.columns:
            close = closest_column(name, info.columns)
            hint = f"; closest found: {close!r} ({option} {close})" if close else ""
            raise GroundlensInputError(
                f"{option} {name}: {job.input} has no such column{hint}; found: {', '.join(info.columns) or 'none'}"
            )


def _ledger_identity(ledger: Any) -> dict[str, str] | None:
    """The ledger a run records to (its full path) and the key id that signs it, or None."""
    if ledger is None:
        return None
    return {"path": str(ledger.path.resolve()), "key": ledger.writer.key.key_id}


def _check_report(job: EvaluateJob, html: Path) -> Callable[..., int]:
    """The writer of the HTML report ``html``, once its path is known to be a new or replaceable HTML
    file (that it is none of the run's other files, :func:`check_own_files` has checked)."""
    if table_kind_or_none(html) is not None:
        raise GroundlensInputError(f"the HTML report {html} would overwrite a data file; give it an .html name")
    check_target(html, what="the HTML report")
    check_html_target(html, what="the HTML report")
    return extensions.batch_html_writer()


@dataclass(frozen=True)
class _Run:
    """One run's input, output and what the checks before scoring found."""

    job: EvaluateJob
    info: Any  # io_formats.TableInfo
    out_kind: str
    columns: list[str]
    schema: Any  # pyarrow schema of a Parquet output
    cal: Any  # CalibrationResult | None
    paths: PartialPaths
    log: Callable[[str], None]


def _resume_state(run: _Run, signature: dict):
    """The checkpoint to continue and the checked digests of what it describes, or ``(None, None)``
    for a fresh start. Refuses in one line what cannot be continued; a leftover that cannot be
    resumed never blocks a run without ``--resume`` (it is replaced, with a note)."""
    from groundlens_core.batch.io_formats import csv_header

    job, out_kind, paths, log = run.job, run.out_kind, run.paths, run.log
    if not paths.checkpoint.exists():
        if job.resume:
            log("note: nothing to resume for this output; starting from the first row")
        return None, None
    header = csv_header(run.columns) if out_kind == "csv" else b""
    saved = verified = None
    renamed = False
    try:
        saved = read_checkpoint(paths.checkpoint, out_kind)
        renamed = not paths.partial.exists() and renamed_output_matches(paths, job.output, saved)
        if not paths.partial.exists() and not renamed:
            raise Unresumable(f"the partial output {paths.partial} of the interrupted run is gone")
        verified = verify_resume(out_kind, job.output if renamed else paths.partial, paths, saved, header)
        problem = None
    except Unresumable as exc:
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
        was = [_was(k, saved["signature"].get(k), signature[k]) for k in diff if k in _SHOWN_CHANGES]
        raise GroundlensInputError(
            f"cannot resume: {', '.join(diff)} changed since the interrupted run "
            f"({'; '.join([*was, ''])}the output would not match an uninterrupted run); "
            f"run again as before, or delete {paths.partial} and {paths.checkpoint.name} to start over"
        )
    if renamed:
        os.replace(job.output, paths.partial)  # checked: the output is exactly the partial
    return saved, verified


#: what a refused resume shows the old and new value of: the settings that are not on the command line
_SHOWN_CHANGES = {
    "max_chars": "GROUNDLENS_MAX_CHARS",
    "ledger_text": "--ledger-text",
    "verifier": "GROUNDLENS_VERIFIER",
}


def _was(key: str, then: Any, now: Any) -> str:
    def shown(value: Any) -> str:
        return ("on" if value else "off") if isinstance(value, bool) or value is None else str(value)

    return f"{_SHOWN_CHANGES[key]} was {shown(then)}, is {shown(now)} now"


def _run_locked(run: _Run, write_report: Callable[..., int] | None) -> JobSummary:
    from groundlens_core.scoring import get_default_embedder

    job, info, paths = run.job, run.info, run.paths
    emb = get_default_embedder()
    signature = run_signature(job, info, run.out_kind, emb, run.cal)
    signature["ledger"] = _ledger_identity(job.ledger)  # a resume never switches ledgers or keys
    signature["ledger_text"] = bool(job.ledger is not None and job.ledger.include_text)  # nor what records keep
    signature["input_columns"] = info.names.as_dict()  # nor reads other columns
    signature["out_columns"] = list(OUT_COLUMNS)  # nor appends other columns to the rows written so far
    state, verified = _resume_state(run, signature)
    rows_done = int(state["rows_done"]) if state else 0
    summary = JobSummary(rows=info.rows, resumed_from=rows_done)
    if state:
        run.log(f"resuming after row {rows_done:,} of {info.rows:,}")

    # the engine starts (Ray: installed? cluster reachable?) before any file of the run is made, so a
    # run that cannot start leaves nothing that would ask the next run for --resume
    scorer = _make_scorer(job, emb, run.cal, info)
    no_context = info.names.context_warning(info.columns, where=str(job.input))
    if no_context:  # scored all the same (questions and answers alone are valid input), but never silently
        run.log(no_context)
    sink = Sink(run.out_kind, paths, run.columns, run.schema)
    keeper = riskiest_keeper(job) if write_report is not None else None
    bar = None
    try:
        sink.open(rows_done=rows_done, state=state, verified=verified)
        if state is None:
            write_checkpoint(paths.checkpoint, signature, 0, sink.state())
        bar = _progress_bar(info.rows, rows_done, job.progress)
        _score_rows(run, scorer, sink, bar, rows_done, signature, keeper)
    except OSError as exc:
        raise (exc if exc.filename else with_path(exc, paths.partial)) from None
    finally:
        if bar is not None:
            bar.close()
        sink.close()
        scorer.close()

    _finish(run, summary, write_report, emb, keeper)
    return summary


def riskiest_keeper(job: EvaluateJob) -> RiskiestKeeper | None:
    """What keeps the results of the rows the HTML report will show, so it need not score them
    again; None when no result would be kept (no rows shown, or Ray, whose workers send cells only)."""
    if job.html is None or job.html_rows <= 0 or job.engine == "ray":
        return None
    return RiskiestKeeper(job.html_rows)


def _finish(
    run: _Run, summary: JobSummary, write_report: Callable[..., int] | None, emb: Any, keeper: RiskiestKeeper | None
) -> None:
    """After the last row: the counts, the report (from the kept results where it has them) and the
    complete output put in place."""
    job, info, paths = run.job, run.info, run.paths
    keys = np.fromfile(paths.keys, dtype=KEY_DTYPE) if paths.keys.stat().st_size else np.zeros(0, KEY_DTYPE)
    if len(keys) != info.rows:
        raise GroundlensInputError(
            f"{job.input} changed while it was being scored ({len(keys)} rows written, {info.rows} scanned)"
        )
    _count(summary, keys)
    if write_report is not None:
        extra = {} if keeper is None else {"kept": keeper}  # a writer of the older signature takes no kept=
        summary.html_rows = write_report(
            job, info, run.out_kind, paths, keys, run.schema, emb=emb, calibration=run.cal, **extra
        )
    order = risk_order(keys) if job.sort else None
    finalize(run.out_kind, paths, job.output, run.columns, run.schema, keys, order)
    paths.remove()


def _score_rows(
    run: _Run, scorer, sink: Sink, bar, rows_done: int, signature: dict, keeper: RiskiestKeeper | None = None
) -> None:
    """Score the rows after ``rows_done`` chunk by chunk, each written and checkpointed before the next;
    ``keeper`` keeps the results the HTML report will show."""
    from groundlens_core.batch.io_formats import READ_ERROR, renamed_inputs, row_item

    job, has_context, names = run.job, run.info.has_context, run.info.names
    renamed = renamed_inputs(run.info.columns)
    rows_iter = iter_rows_checked(run.info, rows_done)
    while True:
        rows = list(islice(rows_iter, scorer.chunk_rows))
        if not rows:
            return
        results: list[Any] = [None] * len(rows)
        todo = [i for i, r in enumerate(rows) if READ_ERROR not in r]
        for i, r in enumerate(rows):
            if READ_ERROR in r:
                results[i] = ScoreError(index=rows_done + i, error=r.pop(READ_ERROR))
        items = [row_item(r, has_context, names) for r in rows]
        for i, res in zip(todo, scorer.score([items[i] for i in todo], rows_done)):
            results[i] = res
        if job.ledger is not None:  # signed records of the rows, before the checkpoint counts them done
            job.ledger.record_rows(items, results, rows_done, signature)
        out = []
        for r, res in zip(rows, results):
            o = {renamed.get(k, k): v for k, v in r.items()}  # an input column named as ours is kept
            o.update(res if isinstance(res, dict) else result_columns(res))  # Ray sends the cells
            out.append(o)
        keys = row_keys(out)  # made once: the keys file and the report's riskiest rows rank by them
        if keeper is not None:
            keeper.offer(rows_done, keys, items, results)
        # write in checkpoint-sized pieces so a resume never has to redo more than one chunk
        for s in range(0, len(out), job.batch_size):
            piece = out[s : s + job.batch_size]
            sink.write(piece, rows_done, keys[s : s + job.batch_size])
            rows_done += len(piece)
            write_checkpoint(run.paths.checkpoint, signature, rows_done, sink.state())
        bar.update(len(rows))


def _count(summary: JobSummary, keys: np.ndarray) -> None:
    """Rows by band and by method, from the keys file."""
    bands = {v: k for k, v in BAND_ORDER.items()}
    for code, n in zip(*np.unique(keys["band"], return_counts=True)):
        summary.counts[bands.get(int(code), "other")] = int(n)
    codes = {v: k for k, v in METHOD_CODES.items()}
    for code, n in zip(*np.unique(keys["method"], return_counts=True)):
        summary.methods[codes.get(int(code), "other")] = int(n)


def table_kind_or_none(path: Path) -> str | None:
    from groundlens_core.batch.io_formats import table_kind

    try:
        return table_kind(path)[0]
    except GroundlensInputError:
        return None


def iter_rows_checked(info, skip: int) -> Iterator[dict]:
    from groundlens_core.batch.io_formats import iter_rows

    return iter_rows(info, skip=skip)


class LocalScorer:
    """Scores in this process, one chunk at a time."""

    def __init__(self, job: EvaluateJob, emb, cal):
        self.job, self.emb, self.cal = job, emb, cal
        self.chunk_rows = job.batch_size

    def score(self, items: list[dict], start: int) -> list:
        from groundlens_core.batch.threads import scoring_threads

        with scoring_threads(self.job.threads):  # encode lanes of one torch thread each
            return chunks.score_chunk(  # looked up per call: one seam for every scoring path
                items, start=start, embedder=self.emb, calibration=self.cal, long_context=self.job.long_context
            )

    def close(self) -> None:
        pass


def _make_scorer(job: EvaluateJob, emb, cal, info):
    if job.engine == "ray":
        from groundlens_core.distributed import RayChunkScorer

        return RayChunkScorer(job, cal)
    return LocalScorer(job, emb, cal)
