"""ONNX Runtime backends (``onnx-fp32``, ``onnx-int8``): the packaged model, one text per run.

Why: on a CPU without native bf16 (AVX2-only servers, laptops and CI runners) the packed torch
pass is the slow part of scoring. ONNX Runtime runs the same encoder with fewer, fused kernels
(GELU, LayerNorm with its residual add), and one text per run needs neither padding nor a mask.

* The graph is written from the packaged weights at first use (:mod:`onnx_graph`, offline) into
  a cache folder (``GROUNDLENS_CACHE_DIR``, else ``~/.cache/groundlens``) under a name made of
  the weights' SHA-256 and the graph version, with a ``.sha256`` file beside it; a file that does
  not match its checksum is rewritten, and where the folder cannot be written the graph is built
  in memory each time the model loads.
* Deterministic the same way as the packed backends: each text runs alone with one intra-op
  thread (the encode lanes are the parallelism), so its rows are a function of the text alone,
  whatever the batch, the lanes or the process.
* ``onnx-int8`` is ONNX Runtime's dynamic int8 quantisation of the dense layers: faster, and
  further from fp32 (docs/determinism.md gives the measured difference). Each backend has its
  own fingerprint suffix (``+onnx``, ``+onnx-int8``), so calibrations never mix their bits.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from groundlens_core import settings
from groundlens_core.embedding import first_load
from groundlens_core.embedding.lanes import current_lanes, run_jobs
from groundlens_core.embedding.onnx_graph import GRAPH_VERSION, attention_matmuls, build_model
from groundlens_core.embedding.resolve import weights_sha256
from groundlens_core.embedding.tokens import SpanPassEmbedder, check_fits, token_range
from groundlens_core.errors import GroundlensInputError

log = logging.getLogger("groundlens.embedding")

INSTALL_HINT = "pip install onnxruntime onnx"
#: texts per job when encode lanes share an encode (one run per text either way)
LANE_JOB_TEXTS = 4
#: texts whose last hidden states are kept after their run, once the verifier asks (up to 400 KB each)
RECENT_STATES = 64


def onnx_available() -> bool:
    """Whether onnxruntime and onnx import (the ``onnx-*`` backends need both)."""
    try:
        with _home_left_alone():
            first_load.import_module("onnxruntime")
        first_load.import_module("onnx")
    except ImportError:
        return False
    return True


def cache_dir() -> Path | None:
    """Where the written graphs are kept: ``GROUNDLENS_CACHE_DIR``, else ``~/.cache/groundlens``;
    None when that would be in a home folder that does not exist (``HOME=/nonexistent``, a service
    account): a home folder is never made, the graph is built in memory instead."""
    chosen = settings.raw("GROUNDLENS_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    return None if _no_home() else Path.home() / ".cache" / "groundlens"


def _no_home() -> bool:
    try:
        return not Path.home().is_dir()
    except (RuntimeError, KeyError, OSError):  # no HOME and no password entry
        return True


@contextlib.contextmanager
def _home_left_alone() -> Iterator[None]:
    """ONNX Runtime keeps a device id under ``$XDG_CACHE_HOME``, else ``~/.cache``, when it is
    imported, making the folders on the way: with no home folder it is pointed at a temporary
    folder for the import (and the setting put back), so that no home folder is made."""
    if os.environ.get("XDG_CACHE_HOME") or not _no_home():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="groundlens-ort-") as tmp:
        os.environ["XDG_CACHE_HOME"] = tmp
        try:
            yield
        finally:
            os.environ.pop("XDG_CACHE_HOME", None)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: what identifies one version of a file on disk: (inode, size, mtime in ns)
FileStamp = tuple[int, int, int]


def _stamp(path: Path) -> FileStamp:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def _graph_file(model_dir: Path, precision: str) -> tuple[bytes, Path | None, FileStamp | None]:
    """The serialised graph (written once per weights and precision, read back after its checksum),
    the cache file that held exactly these bytes (None where the cache folder cannot be written)
    and that file's stamp when it did. ONNX Runtime is given the file, not the bytes: its session
    reads a file with the GIL released, while taking bytes from Python holds the GIL for the whole
    parse (about 50 ms, which the agent's thread would wait out during the first load). The stamp
    lets the caller check that the file it loaded is still the one that was checked."""
    base = cache_dir()
    if base is None:
        return _build(model_dir, precision), None, None
    folder = base / "onnx" / f"{weights_sha256(model_dir)[:24]}-v{GRAPH_VERSION}"
    target = folder / f"model-{precision}.onnx"
    check = target.with_name(target.name + ".sha256")
    try:
        if target.is_file() and check.is_file():
            stamp = _stamp(target)
            data = target.read_bytes()
            if _sha256(data) == check.read_text(encoding="ascii").strip() and _stamp(target) == stamp:
                return data, target, stamp
            log.warning("groundlens: %s does not match its checksum; writing it again", target)
    except OSError:
        pass
    data = _build(model_dir, precision)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path, content in ((target, data), (check, _sha256(data).encode("ascii"))):
            _write_whole(path, content)
    except OSError as exc:
        log.info("groundlens: cannot cache the ONNX graph in %s (%s); it is built in memory", folder, exc)
        return data, None, None
    try:
        return data, target, _stamp(target)
    except OSError:
        return data, None, None


def _write_whole(path: Path, content: bytes) -> None:
    """Write ``path`` through a temporary beside it, renamed over it: another process reads the old
    file or the whole new one. A failed write (a full disk) removes the temporary before it raises."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _build(model_dir: Path, precision: str) -> bytes:
    model = build_model(model_dir)
    if precision == "fp32":
        return model.SerializeToString()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = _DropQuantizerAdvice()
    root = logging.getLogger()
    root.addFilter(quiet)  # its advice to pre-process goes to the root logger, i.e. the user's log
    try:
        return _quantize(model, quantize_dynamic, QuantType)
    finally:
        root.removeFilter(quiet)


class _DropQuantizerAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname


def _quantize(model: Any, quantize_dynamic: Any, QuantType: Any) -> bytes:
    with tempfile.TemporaryDirectory(prefix="groundlens-onnx-") as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model.SerializeToString())
        quantize_dynamic(
            src,
            dst,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=attention_matmuls(model),
        )
        return dst.read_bytes()


def one_thread_session(ort: Any, model: str | bytes) -> Any:
    """An ONNX Runtime CPU session for a graph (its path or its bytes) whose output bits depend on
    the input alone: one thread per run (callers run lanes for parallelism), ops in order,
    deterministic kernels, no spinning threads competing with the agent's, warnings only."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.use_deterministic_compute = True
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


class OnnxMiniLMEmbedder(SpanPassEmbedder):
    """Sentence-transformers' BERT + mean pooling + normalise, on ONNX Runtime, one text per run."""

    def __init__(self, model_path: Path, model_id: str, precision: str = "fp32"):
        if precision not in ("fp32", "int8"):
            raise ValueError(f"precision must be 'fp32' or 'int8', got {precision!r}")
        try:
            with _home_left_alone():
                ort = first_load.import_module("onnxruntime")
            first_load.import_module("onnx")
        except ImportError:
            raise GroundlensInputError(
                f"the onnx-{precision} backend needs ONNX Runtime: {INSTALL_HINT} (or GROUNDLENS_BACKEND=packed-torch)"
            ) from None
        self._path = Path(model_path)
        self.model_id = model_id
        self.precision = precision
        self.backend = f"onnx-{precision}"
        self._fingerprint: str | None = None
        self._lock = first_load.own_lock(self)  # renewed in a forked child
        import json

        cfg = json.loads((self._path / "config.json").read_text(encoding="utf-8"))
        self.dim = int(cfg["hidden_size"])
        self._read_window(self._path, cfg)
        data, cached, stamp = _graph_file(self._path, precision)
        session = None
        if cached is not None:  # the checked cache file: ONNX Runtime reads a path without the GIL
            session = one_thread_session(ort, str(cached))
            try:
                unchanged = _stamp(cached) == stamp
            except OSError:
                unchanged = False
            if not unchanged:  # replaced or changed since it was checked: load the checked bytes
                log.warning("groundlens: %s changed while it was loaded; using the checked graph", cached)
                session = None
        if session is None:
            session = one_thread_session(ort, data)
        self._session = session
        # the states of the latest texts run, for the verifier to read instead of running them again
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_lock = threading.Lock()  # held only around dict updates, never across a fork point
        self.keep_states = False  # set by the verifier: nothing is kept unless it reads them

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from groundlens_core.embedding.resolve import fingerprint_for

            suffix = "+onnx" if self.precision == "fp32" else "+onnx-int8"
            self._fingerprint = fingerprint_for(self.model_id, self._path) + suffix
        return self._fingerprint

    def _ids(self, texts: Sequence[str]) -> list[Any]:
        encs = self._tok.encode_batch(list(texts), add_special_tokens=True)
        for t, e in zip(texts, encs):
            check_fits(t, e.ids, self._max_seq)
        return encs

    def token_states(self, ids: list[int]) -> np.ndarray:
        """The last hidden states of one tokenized text (float32 ``[n, dim]``)."""
        return self._session.run(None, {"input_ids": np.asarray(ids, dtype=np.int64)})[0]

    def recent_states(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The states of each text when one of the latest runs computed them, else None (the same
        bits a new run gives: one text per run, so its states depend on its word pieces alone)."""
        with self._recent_lock:
            return [self._recent.get(t) for t in texts]

    def _keep(self, text: str, states: np.ndarray) -> None:
        with self._recent_lock:
            self._recent[text] = states
            self._recent.move_to_end(text)
            while len(self._recent) > RECENT_STATES:
                self._recent.popitem(last=False)

    def encode_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each text's row and a row per character span of it, from the text's one run (see
        ``PackedMiniLMEmbedder.encode_spans``)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), []
        encs = self._ids(texts)
        tok = [[token_range(e.offsets, a, b) for a, b in sp] for e, sp in zip(encs, spans)]
        step = LANE_JOB_TEXTS if current_lanes() > 1 else len(texts)
        chunks = [list(range(s, min(s + step, len(texts)))) for s in range(0, len(texts), step)]

        def job(chunk: list[int]) -> Callable[[], list[np.ndarray]]:
            def run() -> list[np.ndarray]:
                rows = []
                for i in chunk:
                    states = self.token_states(encs[i].ids)
                    if self.keep_states:
                        self._keep(texts[i], states)
                    rows.append(np.stack([mean_pool(states)] + [mean_pool(states, a, b) for a, b in tok[i]]))
                return rows

            return run

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        picked: list[np.ndarray] = [np.zeros((0, self.dim), dtype=np.float32)] * len(texts)
        with self._lock:
            for chunk, rows in zip(chunks, run_jobs([job(c) for c in chunks])):
                for i, r in zip(chunk, rows):
                    out[i], picked[i] = r[0], r[1:]
        return out, picked


def mean_pool(states: np.ndarray, start: int = 0, end: int | None = None) -> np.ndarray:
    """The L2-normalised mean of rows ``start:end`` (float32; the rows are summed in order, so the
    bits depend on these rows alone)."""
    rows = states[start:end]
    v = rows.sum(axis=0, dtype=np.float32) / np.float32(rows.shape[0])
    norm = np.float32(np.sqrt(np.dot(v.astype(np.float64), v.astype(np.float64))))
    return v / max(norm, np.float32(1e-12))
