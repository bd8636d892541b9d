"""The files a run of ``groundlens evaluate`` keeps beside its target until it completes.

For a target ``out.csv``: ``.out.csv.groundlens-partial`` (the rows so far; a folder of Arrow parts
for Parquet), ``….keys`` (per row: byte offset, band, method, normalized score, 18 bytes, what
``--sort`` and the HTML report read instead of holding rows in memory), ``….json`` (the checkpoint)
and ``.out.csv.groundlens-lock``. :class:`Sink` appends and fsyncs rows and keys, keeping the running
SHA-256 digests the checkpoint records.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from groundlens_core.batch.columns import METHOD_CODES, risk_key
from groundlens_core.batch.outputs import open_own, refuse_link, remove_entry

#: per-row record of the keys file: the row's byte offset (Parquet: its number), its band's place in
#: the review order (:data:`~groundlens_core.batch.columns.BAND_ORDER`), its method code and its score
KEY_DTYPE = np.dtype([("offset", "<i8"), ("band", "i1"), ("method", "i1"), ("norm", "<f8")])


def row_keys(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The keys file records of written rows (band, method, normalized score; the offset is the
    writer's): the one place they are made, so whatever ranks rows as ``--sort`` and the HTML report
    do (:func:`~groundlens_core.batch.final_output.risk_order`) ranks by the same values."""
    keys = np.zeros(len(rows), dtype=KEY_DTYPE)
    for i, r in enumerate(rows):
        keys[i]["band"], keys[i]["norm"] = risk_key(r)
        keys[i]["method"] = METHOD_CODES.get(r.get("groundlens_method"), -1)  # type: ignore[arg-type]
    return keys


@dataclass(frozen=True)
class PartialPaths:
    partial: Path
    keys: Path
    checkpoint: Path
    lock: Path
    output: Path | None = None  # the target these files are beside, named in refusals

    @classmethod
    def beside(cls, output: Path) -> PartialPaths:
        base = output.parent / f".{output.name}.groundlens-partial"
        return cls(
            partial=base,
            keys=Path(f"{base}.keys"),
            checkpoint=Path(f"{base}.json"),
            lock=output.parent / f".{output.name}.groundlens-lock",
            output=output,
        )

    def roles(self) -> tuple[tuple[Path, str], ...]:
        return (
            (self.lock, "lock"),
            (self.partial, "partial output"),
            (self.keys, "row keys"),
            (self.checkpoint, "checkpoint"),
        )

    def refuse_links(self) -> None:
        """One line naming the first of these files that is a symbolic link: groundlens writes,
        truncates and renames them, so a planted link would make it overwrite what it points at."""
        for path, role in self.roles():
            refuse_link(path, role, self.output or path)

    def open(self, path: Path, flags: int, *, fresh: bool) -> int:
        """A descriptor for one of these files (see :func:`~groundlens_core.batch.outputs.open_own`)."""
        role = dict((str(p), r) for p, r in self.roles()).get(str(path), "partial output")
        return open_own(path, flags, role, self.output or path, fresh=fresh)

    def remove(self) -> None:
        """Remove these files (a link itself, never what it points at); the lock is the caller's."""
        for p in (self.keys, self.checkpoint):
            p.unlink(missing_ok=True)
        self.remove_partial()

    def remove_partial(self) -> None:
        remove_entry(self.partial, ignore_errors=True)


def fsync(fh) -> None:
    fh.flush()
    os.fsync(fh.fileno())


@dataclass(frozen=True)
class Verified:
    """The running digests of a partial output and its keys, as the checks left them: the resumed
    run appends to these, so the next checkpoint covers the whole file again."""

    digest: Any
    keys_digest: Any


class Sink:
    """Where the scored rows go while a run is going: append, fsync, truncate back on resume.

    It keeps a running SHA-256 of everything written to the partial output and to the keys file;
    :meth:`state` is what the checkpoint records and :func:`verify_resume` checks."""

    def __init__(self, kind: str, paths: PartialPaths, columns: list[str], schema: Any):
        self.kind, self.paths, self.columns, self.schema = kind, paths, columns, schema
        self.fh = None
        self.parts = 0
        self.bytes = 0
        self.digest = hashlib.sha256()
        self.keys_digest = hashlib.sha256()

    def open(self, *, rows_done: int, state: dict | None, verified: Verified | None = None) -> None:
        from groundlens_core.batch.io_formats import csv_header

        p = self.paths
        if state is not None and verified is not None:
            self.digest, self.keys_digest = verified.digest, verified.keys_digest
            self.bytes = int(state["bytes"])
        if self.kind == "parquet":
            if state is None:
                p.remove_partial()
                p.partial.mkdir()
            else:
                refuse_link(p.partial, "partial output", p.output or p.partial)
                self.parts = int(state["parts"])
                for part in p.partial.glob("part-*.arrow"):
                    if int(part.stem.split("-")[1]) >= self.parts:
                        part.unlink()  # written after the last checkpoint
        else:
            if state is None:
                self.fh = os.fdopen(p.open(p.partial, os.O_WRONLY, fresh=True), "wb")  # type: ignore[assignment]
                if self.kind == "csv":
                    header = csv_header(self.columns)
                    self.fh.write(header)  # type: ignore[attr-defined]
                    self.digest.update(header)
            else:
                self.fh = os.fdopen(p.open(p.partial, os.O_RDWR, fresh=False), "r+b")  # type: ignore[assignment]
                self.fh.truncate(int(state["bytes"]))  # type: ignore[attr-defined]  # drop a chunk written after the last checkpoint
                self.fh.seek(0, os.SEEK_END)  # type: ignore[attr-defined]
            self.bytes = self.fh.tell()  # type: ignore[attr-defined]
        fd = p.open(p.keys, os.O_WRONLY if state is None else os.O_RDWR, fresh=state is None)
        self.keys = os.fdopen(fd, "wb" if state is None else "r+b")
        self.keys.truncate(rows_done * KEY_DTYPE.itemsize)
        self.keys.seek(0, os.SEEK_END)

    def write(self, rows: list[dict], first_row: int, keys: np.ndarray | None = None) -> None:
        """Append ``rows`` (row ``first_row`` on) and their keys records (``keys``: :func:`row_keys` of
        the rows, when the caller made them already; a copy is written, its offsets filled in)."""
        from groundlens_core.batch.io_formats import arrow_table, encode_rows

        keys = row_keys(rows) if keys is None else keys.copy()
        if self.kind == "parquet":
            import pyarrow as pa

            keys["offset"] = np.arange(first_row, first_row + len(rows))
            buf = pa.BufferOutputStream()
            with pa.ipc.new_file(buf, self.schema) as w:
                w.write_table(arrow_table(rows, self.schema))
            data = buf.getvalue().to_pybytes()
            part = self.paths.partial / f"part-{self.parts:07d}.arrow"
            with os.fdopen(self.paths.open(part, os.O_WRONLY, fresh=True), "wb") as fh:
                fh.write(data)
                fsync(fh)
            self.digest.update(data)
            self.bytes += len(data)
            self.parts += 1
        else:
            blobs = encode_rows(self.kind, rows, self.columns)
            offsets = np.cumsum([0] + [len(b) for b in blobs[:-1]], dtype=np.int64) + self.bytes
            keys["offset"] = offsets
            data = b"".join(blobs)
            self.fh.write(data)  # type: ignore[attr-defined]
            fsync(self.fh)
            self.digest.update(data)
            self.bytes = self.fh.tell()  # type: ignore[attr-defined]
        key_bytes = keys.tobytes()
        self.keys.write(key_bytes)
        fsync(self.keys)
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
