"""The checkpoint of a ``groundlens evaluate`` run, and the checks a resume makes before it continues.

The checkpoint pins everything that could change a byte of the output (the input's SHA-256,
columns, chunk size, options, text limit, embedder, version) and the length and SHA-256 of the rows and keys
written so far. A resume proves what it continues: a damaged, edited or missing piece, or a
malformed checkpoint, is :class:`Unresumable` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from groundlens_core.batch import json_input
from groundlens_core.batch.outputs import with_path
from groundlens_core.batch.partial_output import KEY_DTYPE, PartialPaths, Verified, fsync
from groundlens_core.errors import GroundlensInputError

CHECKPOINT_FORMAT = "groundlens-evaluate-checkpoint/2"
_HASH_BLOCK = 1 << 20


class Unresumable(Exception):
    """Why a checkpoint (or what it describes) cannot be continued; the text follows the file's name."""


_CHECKPOINT_FIELDS: dict[str, type] = {
    "format": str,
    "signature": dict,
    "rows_done": int,
    "bytes": int,
    "partial_sha256": str,
    "keys_sha256": str,
}


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` to a fresh temporary file beside ``path`` (created exclusively, so a planted
    link is never followed), then rename it over ``path`` (a link there is replaced, not followed)."""
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
        tmp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, sort_keys=True)
            fsync(fh)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise with_path(exc, path) from None


def write_checkpoint(path: Path, signature: dict, rows_done: int, sink_state: dict) -> None:
    """Record that ``rows_done`` rows are on disk, with the sink's lengths and digests."""
    write_json_atomic(path, {"format": CHECKPOINT_FORMAT, "signature": signature, "rows_done": rows_done, **sink_state})


def read_checkpoint(path: Path, out_kind: str) -> dict:
    """The checkpoint at ``path``, or :class:`Unresumable` naming it and what is wrong with it."""
    try:
        return _checked_checkpoint(path, out_kind)
    except Unresumable as exc:
        raise Unresumable(f"{path} {exc}") from None


def _checked_checkpoint(path: Path, out_kind: str) -> dict:
    try:
        saved = json_input.loads(path.read_bytes(), name=str(path))
    except OSError as exc:
        raise Unresumable(f"cannot be read ({exc.strerror or exc})") from None
    except GroundlensInputError:  # invalid, nested too deeply, a number too long
        raise Unresumable("is not valid JSON (damaged or cut short)") from None
    if not isinstance(saved, dict):
        raise Unresumable(f"is not a checkpoint (a JSON {type(saved).__name__}, not an object)")
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise Unresumable(f"is not a checkpoint this version can resume (format {saved.get('format')!r})")
    fields = dict(_CHECKPOINT_FIELDS, **({"parts": int} if out_kind == "parquet" else {}))
    for name, kind in fields.items():
        if name not in saved:
            raise Unresumable(f"has no {name!r}")
        value = saved[name]
        if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise Unresumable(f"has a malformed {name!r} ({value!r})")
    rows = saved["signature"].get("rows")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:  # true/false are not counts
        raise Unresumable(f"has a malformed 'rows' in its signature ({rows!r})")
    if saved["rows_done"] > rows:
        raise Unresumable(f"says {saved['rows_done']:,} rows were done of {rows!r}")
    return saved


def _hash_prefix(path: Path, size: int, digest: Any) -> Any:
    """``digest`` updated with the first ``size`` bytes of ``path`` (which must have them)."""
    left = size
    with open(path, "rb") as fh:
        while left > 0:
            block = fh.read(min(_HASH_BLOCK, left))
            if not block:
                raise Unresumable(f"is shorter than its checkpoint says ({size - left:,} of {size:,} bytes)")
            digest.update(block)
            left -= len(block)
    return digest


def verify_resume(out_kind: str, partial: Path, paths: PartialPaths, state: dict, header: bytes) -> Verified:
    """Check the written rows and their keys against the checkpoint: lengths, SHA-256 digests and
    that the keys' offsets describe ``rows_done`` rows of the partial output. Raises
    :class:`Unresumable` naming the first file that does not match."""
    rows_done, size = int(state["rows_done"]), int(state["bytes"])
    # the partial output
    try:
        if out_kind == "parquet":
            if not partial.is_dir():
                raise Unresumable("is not the folder of Arrow parts this run writes")
            digest = hashlib.sha256()
            total = 0
            for k in range(int(state["parts"])):
                part = partial / f"part-{k:07d}.arrow"
                if not part.is_file():
                    raise Unresumable(f"has lost {part.name}")
                n = part.stat().st_size
                _hash_prefix(part, n, digest)
                total += n
            if total != size:
                raise Unresumable(f"holds {total:,} bytes of rows where the checkpoint says {size:,}")
        else:
            if not partial.is_file():
                raise Unresumable("is not a file")
            have = partial.stat().st_size
            if have < size:
                raise Unresumable(f"is shorter than its checkpoint says ({have:,} of {size:,} bytes)")
            digest = _hash_prefix(partial, size, hashlib.sha256())
        if digest.hexdigest() != state["partial_sha256"]:
            raise Unresumable("does not match its checkpoint (SHA-256 of the rows written; changed or damaged)")
    except (Unresumable, OSError) as exc:
        raise _blame(partial, exc) from None
    # the keys
    try:
        want = rows_done * KEY_DTYPE.itemsize
        have = paths.keys.stat().st_size if paths.keys.is_file() else -1
        if have < want:
            raise Unresumable(
                "is missing" if have < 0 else f"is shorter than its checkpoint says ({have:,} of {want:,} bytes)"
            )
        keys_digest = _hash_prefix(paths.keys, want, hashlib.sha256())
        if keys_digest.hexdigest() != state["keys_sha256"]:
            raise Unresumable(
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
            raise Unresumable(f"does not describe {rows_done:,} rows of {partial.name}")
    except (Unresumable, OSError) as exc:
        raise _blame(paths.keys, exc) from None
    return Verified(digest=digest, keys_digest=keys_digest)


def _blame(path: Path, exc: BaseException) -> Unresumable:
    why = str(exc) if isinstance(exc, Unresumable) else f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    return Unresumable(f"{path} {why}")


def run_signature(job: Any, info, out_kind: str, emb, cal) -> dict:
    """What a resume must find unchanged (``job`` is an :class:`~groundlens_core.batch.evaluate_job.EvaluateJob`)."""
    from groundlens_core import scoring
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
        "max_chars": scoring.MAX_TEXT_CHARS,  # GROUNDLENS_MAX_CHARS: which rows are refused as too long
        "calibration": None if cal is None else cal.direction_id,
        "fingerprint": emb.fingerprint,
        "backend": emb.backend,
        "verifier": _verifier_id(),  # the weights that decide the band (None when switched off)
        "version": __version__,
    }


def _verifier_id() -> str | None:
    from groundlens_core.verifier import get_verifier

    verifier = get_verifier()
    return None if verifier is None else verifier.id


def _file_sha256(path: Path) -> str:
    """The input's identity for a resume: its content, not its size and modification time (an
    edit that keeps both would otherwise be continued silently). Hashing runs at about 1.7 GB/s,
    a fraction of the pass that counts the rows."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def renamed_output_matches(paths: PartialPaths, output: Path, state: dict) -> bool:
    """A run stopped after renaming its complete CSV/JSONL into place but before removing its
    checkpoint left the checkpoint and keys without a partial. The output is then exactly the
    partial (same bytes, so the keys' offsets hold): a resume checks it as the partial, moves it
    back and finishes as any other (the second pass, ``--sort`` and ``--html``, then the clean-up)."""
    rows = state["signature"]["rows"]
    return (
        state["rows_done"] == rows
        and "parts" not in state
        and output.is_file()
        and not output.is_symlink()
        and output.stat().st_size == state["bytes"]
        and paths.keys.is_file()
        and paths.keys.stat().st_size == rows * KEY_DTYPE.itemsize
    )
