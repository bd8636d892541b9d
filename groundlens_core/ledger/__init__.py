"""Signed, hash-chained decision records: an audit trail that shows any edit.

Every scored step or row becomes one JSON line in an append-only ledger (:mod:`.records`), signed
with Ed25519 (:mod:`.keys`) and naming the SHA-256 of the record before it, so a record changed,
deleted, inserted, moved or copied breaks the chain or a signature. :mod:`.writer` appends safely
across processes; :func:`verify_ledger` (:mod:`.verify`) names the first line that does not hold.
See docs/ledger.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from groundlens_core import settings
from groundlens_core.ledger.keys import (
    ENV_SIGNING_KEY,
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    SigningKey,
    key_id,
    load_public_key,
    load_signing_key,
    write_keypair,
)
from groundlens_core.ledger.records import (
    FORMAT,
    GENESIS,
    canonical_bytes,
    decision_record,
    sha256_hex,
    text_sha256,
)
from groundlens_core.ledger.verify import PROBLEMS, LedgerVerdict, iter_records, verify_ledger
from groundlens_core.ledger.writer import LedgerTail, LedgerWriteError, LedgerWriter, check_ledger_path, read_tail

#: the environment settings the recorder reads (with ``GROUNDLENS_SIGNING_KEY``)
ENV_LEDGER = "GROUNDLENS_LEDGER"
ENV_LEDGER_TEXT = "GROUNDLENS_LEDGER_TEXT"

__all__ = [
    "ENV_LEDGER",
    "ENV_LEDGER_TEXT",
    "ENV_SIGNING_KEY",
    "FORMAT",
    "GENESIS",
    "PRIVATE_KEY_NAME",
    "PROBLEMS",
    "PUBLIC_KEY_NAME",
    "Ledger",
    "LedgerTail",
    "LedgerVerdict",
    "LedgerWriteError",
    "LedgerWriter",
    "SigningKey",
    "canonical_bytes",
    "check_ledger_path",
    "decision_record",
    "iter_records",
    "key_id",
    "load_public_key",
    "load_signing_key",
    "read_tail",
    "sha256_hex",
    "text_sha256",
    "verify_ledger",
    "write_keypair",
]


class Ledger:
    """Where decision records go: a ledger file, the key that signs, and whether texts are kept.

    The key is read from its file now, so a missing or unreadable key stops the run before any
    scoring. ``include_text=True`` also stores the question, context and response themselves
    (by default only their SHA-256 hashes)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        signing_key: str | os.PathLike[str] | SigningKey | None = None,
        *,
        include_text: bool = False,
    ):
        if isinstance(signing_key, SigningKey):
            key = signing_key
        else:
            key = load_signing_key(signing_key if signing_key is not None else os.environ.get(ENV_SIGNING_KEY))
        self.writer = LedgerWriter(path, key)
        self.include_text = include_text

    @property
    def path(self) -> Path:
        return self.writer.path

    def append(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return self.writer.append(bodies)

    def check(self) -> None:
        """Raise the one-line error the next append would (the ledger's last line cannot be
        continued from, or it is not a regular file): to stop a run before any work."""
        self.writer.check()

    @classmethod
    def from_env(cls) -> Ledger | None:
        """The ledger ``GROUNDLENS_LEDGER`` names, signed with ``GROUNDLENS_SIGNING_KEY`` (None when
        unset), keeping the texts when ``GROUNDLENS_LEDGER_TEXT`` is on (a value that is neither on
        nor off is a one-line error)."""
        path = settings.raw(ENV_LEDGER)
        if path is None:
            return None
        return cls(path, include_text=settings.flag(ENV_LEDGER_TEXT, strict=True))

    def record_rows(
        self, items: Sequence[Mapping[str, Any]], results: Sequence[Any], first_row: int, run: Mapping[str, Any]
    ) -> None:
        """One record per row of a file being scored (``results``: scores, errors or a Ray worker's
        cells). ``run`` is what identifies the run (``groundlens evaluate``'s checkpoint signature:
        input, options, embedder, version); its hash is the records' trace id, so the rows of a
        resumed run carry the same one."""
        trace_id = sha256_hex(canonical_bytes(run))[:32]
        bodies = []
        for i, (item, res) in enumerate(zip(items, results)):
            method = str(_get(res, "method", "groundlens_method") or "error")
            band = "error" if method == "error" else str(_get(res, "triage", "groundlens_triage"))
            bodies.append(
                decision_record(
                    method=method,
                    band=band,
                    question=item.get("question"),
                    context=item.get("context"),
                    response=item.get("response"),
                    result=res,
                    reason=_get(res, "error", "groundlens_error") if method == "error" else None,
                    row=first_row + i,
                    trace_id=trace_id,
                    fingerprint=run.get("fingerprint"),
                    include_text=self.include_text,
                )
            )
        self.append(bodies)


def _get(res: Any, attr: str, cell: str) -> Any:
    if isinstance(res, Mapping):
        return res.get(cell, res.get(attr))
    return getattr(res, attr, None)
