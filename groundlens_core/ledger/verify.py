"""Verification of a ledger: every signature and link checked, the first bad line named.

What this does not prove: whoever holds the private key can rewrite the whole ledger, and cutting
whole records off the end leaves a shorter, valid chain. Keep a copy of the chain head
(:attr:`LedgerVerdict.head`) somewhere else if that matters (docs/ledger.md).
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from groundlens_core.batch.json_input import too_deep
from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger.keys import _crypto, key_id, load_public_key
from groundlens_core.ledger.records import FORMAT, GENESIS, _not_regular, canonical_bytes, crash_cut, sha256_hex

#: the ways a ledger can be wrong, as :attr:`LedgerVerdict.problem` names them
PROBLEMS = ("changed", "deleted", "inserted", "reordered", "replayed", "cut_short", "other_key", "empty")


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class LedgerVerdict:
    """What :func:`verify_ledger` found. ``ok`` with ``records`` checked, or the first bad line."""

    ok: bool
    records: int  # records checked (segment records included)
    head: str | None = None  # SHA-256 of the last record: keep it elsewhere to detect a cut-off end
    problem: str | None = None  # one of PROBLEMS
    line: int | None = None  # 1-based line of the first bad record
    record_id: str | None = None
    detail: str = ""
    segments: int = 0  # segment records (each closes a line a crash cut)
    cut_lines: tuple[int, ...] = ()

    def message(self) -> str:
        """One line: ``N records, chain intact`` or what is wrong where."""
        if self.ok:
            text = f"{self.records} records, chain intact"
            if self.cut_lines:
                lines = ", ".join(str(n) for n in self.cut_lines)
                text += f" ({len(self.cut_lines)} line(s) cut by a crash, each closed by a segment record: {lines})"
            return text
        rid = f" (record {self.record_id})" if self.record_id else ""
        where = f"line {self.line}{rid}" if self.line is not None else "the ledger"
        return f"{where}: {self.problem.replace('_', ' ') if self.problem else 'bad'}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cut_lines": list(self.cut_lines), "message": self.message()}


@dataclass
class _Line:
    number: int
    raw: bytes
    record: dict[str, Any] | None  # None unless the line is a JSON object in canonical form
    hash: str
    parsed: Any = None  # the line's JSON, canonical or not (to name a changed record's id)


def _read_lines(path: Path) -> tuple[list[_Line], bool]:
    """The ledger's lines, read under a shared ``flock``: a writer's batch is either all there or
    not yet (never half of it, which would read as a line cut short)."""
    import fcntl

    try:
        problem = _not_regular(path, os.stat(path).st_mode)  # a FIFO or device is never opened
        if problem is not None:
            raise problem
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            problem = _not_regular(path, os.fstat(fd).st_mode)
            if problem is not None:
                raise problem
            fcntl.flock(fd, fcntl.LOCK_SH)  # whole batches only: a writer appends under LOCK_EX
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read()
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise GroundlensInputError(f"ledger not found: {path}") from None
    except OSError as exc:
        raise GroundlensInputError(f"cannot read the ledger {path}: {exc.strerror or exc}") from None
    parts = data.split(b"\n")
    ends_whole = data.endswith(b"\n") or not data
    if ends_whole:
        parts = parts[:-1]
    lines = []
    for n, raw in enumerate(parts, 1):
        rec: dict[str, Any] | None
        try:
            parsed = None if too_deep(raw) else json.loads(raw)  # a record nests three levels
            rec = parsed if isinstance(parsed, dict) and canonical_bytes(parsed) == raw else None
        except (ValueError, RecursionError):
            parsed = rec = None
        lines.append(_Line(n, raw, rec, sha256_hex(raw), parsed))
    return lines, ends_whole


def verify_ledger(path: str | os.PathLike[str], public_key: Any, *, head: str | None = None) -> LedgerVerdict:
    """Check every line of a ledger: signature, chain link, sequence, uniqueness.

    ``public_key`` is a path to the PEM public key or a loaded Ed25519 public key. Returns the
    verdict for the whole file, naming the first bad line (1-based) and what is wrong with it:
    ``changed``, ``deleted`` (records missing before it), ``inserted``, ``reordered``, ``replayed``,
    ``cut_short`` (an incomplete last line) or ``other_key`` (signed by a key other than this one).
    ``head``: a chain head kept elsewhere earlier (:attr:`LedgerVerdict.head`); it must still be a
    record of the chain, which catches whole records cut off the end and a chain rewritten since.
    """
    if head is not None and not _HEX64.fullmatch(head.strip()):
        raise GroundlensInputError(
            "the chain head given is malformed: a head is the 64 hex digits `groundlens verify` prints after 'head'"
        )
    _, _, invalid_signature = _crypto()
    pub = public_key if hasattr(public_key, "verify") else load_public_key(public_key)
    lines, ends_whole = _read_lines(Path(path).expanduser())
    chain = _Chain(lines, ends_whole, pub, invalid_signature, key_id(pub))
    for i, ln in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        cut = _cut_closed_by(ln, nxt)
        verdict = chain.take_cut(ln, nxt, cut) if cut is not None else chain.take(ln, nxt)
        if verdict is not None:
            return verdict
    return chain.final(head)


def _cut_closed_by(ln: _Line, nxt: _Line | None) -> dict[str, Any] | None:
    """The ``cut`` of the segment record on the next line when it names this very line (its hash
    and length): the line is one a crash cut, checked as such instead of as a record."""
    cut = (nxt.record or {}).get("cut") if nxt is not None and (nxt.record or {}).get("type") == "segment" else None
    if isinstance(cut, dict) and cut.get("sha256") == ln.hash and cut.get("bytes") == len(ln.raw):
        return cut
    return None


@dataclass
class _Chain:
    """The walk along a ledger's lines: the last good record and what has been counted so far, so
    that each check can tell a line that breaks the chain from one the chain goes around."""

    lines: list[_Line]
    ends_whole: bool
    pub: Any
    invalid_signature: type[Exception]
    expected_key: str
    by_hash: dict[str, int] = field(init=False)
    seen: dict[str, int] = field(default_factory=dict)  # record id -> its line
    prev_hash: str = GENESIS
    prev_seq: int = -1
    prev_line: int = 0
    count: int = 0
    segments: int = 0
    cuts: list[int] = field(default_factory=list)
    good: set[str] = field(default_factory=set)  # hashes of the records checked so far
    after_cut: bool = False

    def __post_init__(self) -> None:
        self.by_hash = {ln.hash: ln.number for ln in self.lines if ln.record is not None}

    def bad(self, ln: _Line, problem: str, detail: str) -> LedgerVerdict:
        found = ln.record if ln.record is not None else ln.parsed
        rid = found.get("id") if isinstance(found, dict) else None
        return LedgerVerdict(
            False,
            self.count,
            None,
            problem,
            ln.number,
            str(rid) if rid else None,
            detail,
            self.segments,
            tuple(self.cuts),
        )

    def fits(self, ln: _Line | None) -> bool:
        """Whether ``ln`` is the record that comes next in the chain."""
        r = ln.record if ln is not None else None
        return r is not None and r.get("prev") == self.prev_hash and r.get("seq") == self.prev_seq + 1

    def take_cut(self, ln: _Line, nxt: _Line | None, cut: dict[str, Any]) -> LedgerVerdict | None:
        """A line a segment record closes: a crash's, or a forgery hiding behind one."""
        if cut.get("line") != ln.number:
            return self.bad(nxt, "changed", f"its segment names line {cut.get('line')} as cut, not line {ln.number}")  # type: ignore[arg-type]
        if not _cut_by_a_crash(ln, self.pub, self.invalid_signature, self.prev_hash, self.prev_seq):
            return self.bad(
                ln,
                "changed",
                "a whole line that is not a record of this chain, closed by a segment record as if a crash had cut it",
            )
        self.cuts.append(ln.number)
        self.after_cut = True
        return None

    def take(self, ln: _Line, nxt: _Line | None) -> LedgerVerdict | None:
        """Check one line as the next record of the chain; the first problem found, or None once it
        is counted as good."""
        rec = ln.record
        if rec is None:
            return self._not_a_record(ln, nxt)
        rid = str(rec.get("id", ""))
        if rid in self.seen:
            return self.bad(ln, "replayed", f"a copy of the record at line {self.seen[rid]}")
        verdict = self._unsigned(ln, nxt, rec)
        if verdict is None:
            verdict = self._unlinked(ln, nxt, rec)
        if verdict is not None:
            return verdict
        if nxt is None and not self.ends_whole:  # a record of the chain; only its line end is missing
            return self.bad(ln, "cut_short", "the last line has no line end (a writer stopped before finishing it)")
        if rec.get("type") == "segment":
            self.segments += 1
            if rec.get("cut") is not None and not self.after_cut:
                return self.bad(ln, "changed", "it names a cut line that is not before it")
        self.after_cut = False
        self.seen[rid] = ln.number
        self.good.add(ln.hash)
        self.prev_hash, self.prev_seq, self.prev_line = ln.hash, int(rec["seq"]), ln.number
        self.count += 1
        return None

    def _not_a_record(self, ln: _Line, nxt: _Line | None) -> LedgerVerdict:
        """A line that is no record in canonical form: a cut-off end, a line slipped in, or a change."""
        if nxt is None and not self.ends_whole and crash_cut(ln.raw):
            return self.bad(ln, "cut_short", "the last line is incomplete (a writer stopped in the middle of it)")
        if self.fits(nxt):
            return self.bad(ln, "inserted", "a line that is not a record of this chain (the chain goes around it)")
        return self.bad(ln, "changed", "not a groundlens record in canonical form")

    def _unsigned(self, ln: _Line, nxt: _Line | None, rec: dict[str, Any]) -> LedgerVerdict | None:
        """A record whose signature this key does not verify, named by why: slipped in, never
        signed, signed by another key, or changed since it was signed."""
        if _signature_ok(rec, self.pub, self.invalid_signature):
            return None
        if self.fits(nxt):
            return self.bad(ln, "inserted", "a record this key did not sign (the chain goes around it)")
        if not isinstance(rec.get("key"), str) or not isinstance(rec.get("sig"), str):
            return self.bad(ln, "changed", "not a signed record (it has no key or no signature)")
        if rec.get("key") != self.expected_key:
            return self.bad(
                ln, "other_key", f"signed by key {str(rec.get('key'))[:16]}…, not by {self.expected_key[:16]}…"
            )
        return self.bad(ln, "changed", "the signature does not match the record's content")

    def _unlinked(self, ln: _Line, nxt: _Line | None, rec: dict[str, Any]) -> LedgerVerdict | None:
        """A signed record in an unknown format or that does not follow the one before it, named
        by where the chain goes instead: reordered, inserted, records deleted, or changed."""
        if rec.get("v") != FORMAT:
            return self.bad(ln, "changed", f"unknown record format {rec.get('v')!r}")
        if rec.get("prev") == self.prev_hash and rec.get("seq") == self.prev_seq + 1:
            return None
        later = self.by_hash.get(str(rec.get("prev")))
        if later is not None and later > ln.number:
            return self.bad(ln, "reordered", f"it follows the record at line {later}, which comes after it")
        if self.fits(nxt):
            return self.bad(ln, "inserted", "a record from elsewhere (the chain goes around it)")
        seq, prev_seq = rec.get("seq"), self.prev_seq
        if isinstance(seq, int) and seq > prev_seq + 1 and rec.get("prev") not in self.by_hash:
            missing = seq - prev_seq - 1
            where = f"after line {self.prev_line}" if self.prev_line else "at the start"
            return self.bad(ln, "deleted", f"{missing} record(s) missing {where} (sequence {prev_seq + 1}..{seq - 1})")
        return self.bad(ln, "changed", "it does not link to the record before it")

    def final(self, head: str | None) -> LedgerVerdict:
        """The verdict once every line is checked: the chain is intact unless the ``head`` kept
        earlier is no longer one of its records."""
        last = self.prev_hash if self.count else None
        if head is not None and head.strip().lower() not in self.good:
            return LedgerVerdict(
                False,
                self.count,
                last,
                "deleted",
                detail=f"the chain head {head.strip()[:16]}… kept earlier is not in the ledger: records were "
                "cut off its end, or the chain was rewritten since",
                segments=self.segments,
                cut_lines=tuple(self.cuts),
            )
        return LedgerVerdict(True, self.count, last, segments=self.segments, cut_lines=tuple(self.cuts))


def _cut_by_a_crash(ln: _Line, pub: Any, invalid_signature: type[Exception], prev_hash: str, prev_seq: int) -> bool:
    """A line a segment record closes is a crash's: a proper start of a record, or a whole record
    of this chain (signed, linked to the record before it) that lost only its newline."""
    if crash_cut(ln.raw):
        return True
    rec = ln.record
    return (
        rec is not None
        and rec.get("prev") == prev_hash
        and rec.get("seq") == prev_seq + 1
        and _signature_ok(rec, pub, invalid_signature)
    )


def _signature_ok(rec: Mapping[str, Any], pub: Any, invalid_signature: type[Exception]) -> bool:
    sig = rec.get("sig")
    if not isinstance(sig, str):
        return False
    body = {k: v for k, v in rec.items() if k != "sig"}
    try:
        pub.verify(base64.b64decode(sig, validate=True), canonical_bytes(body))
    except (invalid_signature, ValueError, TypeError):
        return False
    return True


def iter_records(path: str | os.PathLike[str]) -> Iterable[dict[str, Any]]:
    """The records of a ledger in order (lines that are not records are left out); no checks."""
    for ln in _read_lines(Path(path).expanduser())[0]:
        if ln.record is not None:
            yield ln.record
