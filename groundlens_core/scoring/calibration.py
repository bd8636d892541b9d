"""DGI directions: build one from verified grounded pairs, save it, load it, check its embedder.

mu_hat = normalise(mean_i unit(phi(r_i) - phi(q_i))). ``concentration`` is the length of that mean
before normalising (the mean resultant length, in [0, 1]): 1 when every pair moves the same way,
near 0 when the pairs agree on nothing. One continuous formula, no thresholds.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from groundlens_core._version import __version__
from groundlens_core.batch import json_input
from groundlens_core.batch.outputs import check_input_file
from groundlens_core.errors import CalibrationMismatchError, GroundlensInputError

FORMAT = "groundlens-calibration"
FORMAT_VERSION = 1
BUNDLED_NAME = "dgi_direction_halueval_general.json"


@dataclass(frozen=True)
class CalibrationResult:
    direction: tuple[float, ...]
    n_pairs: int
    dim: int
    concentration: float
    fingerprint: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    @property
    def vector(self) -> np.ndarray:
        return np.asarray(self.direction, dtype=np.float64)

    @property
    def direction_id(self) -> str:
        name = self.metadata.get("name")
        if name:
            return f"bundled:{name}" if self.metadata.get("bundled") else f"calibration:{name}"
        digest = hashlib.sha256(np.asarray(self.direction, dtype=np.float64).tobytes()).hexdigest()[:12]
        return f"calibration:{digest}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "direction": list(self.direction),
            "n_pairs": self.n_pairs,
            "dim": self.dim,
            "concentration": self.concentration,
            "fingerprint": self.fingerprint,
            "metadata": self.metadata,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the direction as JSON through the one output writer (a temporary file renamed into
        place: a failure leaves an existing file as it was)."""
        from groundlens_core.batch.outputs import write_text

        return write_text(
            path, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n", what="the calibration file"
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CalibrationResult:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise GroundlensInputError(f"not a groundlens calibration file (format={found!r})")
        try:
            fields: dict[str, Any] = {
                "direction": tuple(float(x) for x in data["direction"]),
                "dim": int(data["dim"]),
                "n_pairs": int(data["n_pairs"]),
                "concentration": float(data["concentration"]),
                "fingerprint": str(data["fingerprint"]),
                "metadata": dict(data.get("metadata") or {}),
            }
        except KeyError as exc:
            raise GroundlensInputError(f"calibration file is missing the field {exc.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise GroundlensInputError(f"calibration file has a malformed field: {exc}") from None
        if len(fields["direction"]) != fields["dim"] or not np.isfinite(fields["direction"]).all():
            raise GroundlensInputError("calibration direction is malformed (wrong length or non-finite values)")
        return cls(**fields)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationResult:
        check_input_file(path, what="calibration file")
        try:
            data = json_input.loads(Path(path).read_bytes(), name=f"calibration file {path}")
        except FileNotFoundError:
            raise GroundlensInputError(f"calibration file not found: {path}") from None
        try:
            return cls.from_dict(data)
        except GroundlensInputError as exc:
            raise GroundlensInputError(f"{path}: {exc}") from None


def direction_from_vectors(q: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float, int]:
    """(mu_hat, concentration, pairs used) from question and response embeddings (float64 math)."""
    disp = r.astype(np.float64) - q.astype(np.float64)
    norms = np.linalg.norm(disp, axis=1)
    keep = norms > 1e-6  # a response identical to its question carries no direction
    if not keep.any():
        raise GroundlensInputError("every pair has a response identical to its question; nothing to calibrate on")
    unit = disp[keep] / norms[keep, None]
    mean = unit.mean(axis=0)
    length = float(np.linalg.norm(mean))
    if length < 1e-12:
        raise GroundlensInputError("the pairs' displacements cancel out; no direction can be formed")
    return mean / length, length, int(keep.sum())


def read_pairs_csv(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """Rows with non-blank ``question`` and ``response``; a ``label`` column, if present, keeps label 1 only."""
    path = check_input_file(path, what="pairs file")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cols = set(reader.fieldnames or [])
            missing = {"question", "response"} - cols
            if missing:
                raise GroundlensInputError(
                    f"{path}: missing column(s) {', '.join(sorted(missing))}; found {', '.join(sorted(cols)) or 'none'}"
                )
            rows = list(reader)
    except FileNotFoundError:
        raise GroundlensInputError(f"file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise GroundlensInputError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "label" in cols:
        rows = [r for r in rows if str(r.get("label", "")).strip() in ("1", "1.0", "true", "True")]
    return [
        (r["question"], r["response"]) for r in rows if (r["question"] or "").strip() and (r["response"] or "").strip()
    ]


def calibrate(
    pairs: Iterable[tuple[str, str]] | None = None,
    *,
    csv_path: str | os.PathLike[str] | None = None,
    embedder=None,
    metadata: dict[str, Any] | None = None,
) -> CalibrationResult:
    """Build a DGI direction from *verified grounded* (question, response) pairs."""
    from groundlens_core.embedding.plan import embed_many, get_default_embedder

    if (pairs is None) == (csv_path is None):
        raise GroundlensInputError("calibrate() takes exactly one of pairs=... or csv_path=...")
    meta = dict(metadata or {})
    if csv_path is not None:
        pair_list = read_pairs_csv(csv_path)
        meta.setdefault("source", str(csv_path))
        meta.setdefault("source_sha256", hashlib.sha256(Path(csv_path).read_bytes()).hexdigest())
    else:
        # only real text: None or a pandas NaN must not become the strings "None" / "nan"
        pair_list = [(q, r) for q, r in pairs if isinstance(q, str) and isinstance(r, str) and q.strip() and r.strip()]  # type: ignore[union-attr]
    if len(pair_list) < 2:
        raise GroundlensInputError(
            f"calibration needs at least 2 grounded pairs with non-blank text; got {len(pair_list)}"
        )
    emb = embedder or get_default_embedder()
    vectors = embed_many(emb, [q for q, _ in pair_list] + [r for _, r in pair_list])
    n = len(pair_list)
    mu, concentration, used = direction_from_vectors(vectors[:n], vectors[n:])
    meta.setdefault("groundlens_version", __version__)
    return CalibrationResult(
        direction=tuple(float(x) for x in mu),
        n_pairs=used,
        dim=int(mu.shape[0]),
        concentration=concentration,
        fingerprint=emb.fingerprint,
        metadata=meta,
    )


_CSV_CACHE: dict[tuple[str, str, str], CalibrationResult] = {}
_CSV_CACHE_MAX = 16


def calibration_from_csv(csv_path: str | os.PathLike[str], embedder: Any = None) -> CalibrationResult:
    """:func:`calibrate` on a CSV of grounded pairs, cached by the file's content and the embedder:
    the original API's ``compute_dgi(..., reference_csv=...)`` calibrates on the fly, and a loop
    over many responses must not re-embed the same reference file each time."""
    from groundlens_core.embedding.plan import get_default_embedder

    emb = embedder or get_default_embedder()
    path = check_input_file(csv_path, what="pairs file")
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise GroundlensInputError(f"file not found: {path}") from None
    key = (str(path.resolve()), digest, str(emb.fingerprint))
    cached = _CSV_CACHE.get(key)
    if cached is None:
        cached = calibrate(csv_path=path, embedder=emb)
        if len(_CSV_CACHE) >= _CSV_CACHE_MAX:
            _CSV_CACHE.pop(next(iter(_CSV_CACHE)))
        _CSV_CACHE[key] = cached
    return cached


def bundled_direction() -> CalibrationResult:
    """The generic DGI direction shipped with the package (see its metadata for provenance)."""
    text = resources.files("groundlens_core.data").joinpath(BUNDLED_NAME).read_text(encoding="utf-8")
    return CalibrationResult.from_dict(json.loads(text))


#: what a backend appends to the weights' fingerprint (its bits are not the fp32 packed pass's)
PRECISION_SUFFIXES = ("+bf16", "+onnx", "+onnx-int8")


def weights_of(fingerprint: str) -> str:
    """The fingerprint without a backend's suffix (``+bf16``, ``+onnx``, ``+onnx-int8``): a direction
    fitted on the fp32 pass of some weights serves the other passes of the same weights (their
    embeddings agree to cosine >= 0.99995 for bf16 and ONNX fp32, >= 0.98 for ONNX int8; measured by
    benchmarks/bench_bf16_quality.py and benchmarks/bench_backends.py), and the other way round."""
    for suffix in PRECISION_SUFFIXES:
        if fingerprint.endswith(suffix):
            return fingerprint[: -len(suffix)]
    return fingerprint


def resolve_calibration(
    calibration: CalibrationResult | str | os.PathLike[str] | None, fingerprint: str
) -> CalibrationResult:
    """A calibration object, file path, or None (the bundled direction), checked against ``fingerprint``."""
    if calibration is None:
        cal = bundled_direction()
    elif isinstance(calibration, CalibrationResult):
        cal = calibration
    else:
        cal = CalibrationResult.load(calibration)
    if weights_of(cal.fingerprint) != weights_of(fingerprint):
        raise CalibrationMismatchError(
            f"this DGI direction was built with embedder {cal.fingerprint}, but scoring uses {fingerprint}; "
            "re-run `groundlens calibrate` with the current model"
        )
    return cal
