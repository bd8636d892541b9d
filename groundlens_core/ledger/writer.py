"""The ledger writer: appends signed, chained records to one file, safe across threads and processes.

Writers take an exclusive ``fcntl.flock`` on the ledger for each batch: they read the current head
under the lock, append whole lines, ``fsync`` and let go, so two processes appending to one ledger
never interleave and keep one chain. A crash can leave a cut last line; the next writer closes it
and appends a ``segment`` record that names it (line number, length, SHA-256) and links to the last
whole record. Only a proper start of a record counts as cut: a whole last record without its
newline is verified (this writer's key, linked to the record before it) and then only has its line
ended, or, when it does not verify, nothing is appended. The chain goes on only from a record
this writer's key signed: an unsigned or changed last line, or another key's record, is refused.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger.keys import SigningKey
from groundlens_core.ledger.records import (
    FORMAT,
    GENESIS,
    _not_regular,
    _utc_now,
    canonical_bytes,
    crash_cut,
    sha256_hex,
)

_TAIL_READ = 64 * 1024  # bytes read from the end at a time to find the head


@dataclass
class _Head:
    """The end of the ledger as this writer left it: file identity and size, last record's hash and seq."""

    ino: int = -1
    size: int = -1
    hash: str = GENESIS
    seq: int = -1


class LedgerWriter:
    """Appends signed records to one ledger file; safe across threads and processes.

    Each :meth:`append` is one batch: open, ``flock``, read the head (unless the file is as this
    writer left it), sign and write the whole lines, ``fdatasync``, unlock, close. The file is
    opened per batch, and a forked child closes its copy of one open at the fork, so the child and
    its parent never share a file lock.
    """

    def __init__(self, path: str | os.PathLike[str], key: SigningKey):
        self.path = Path(path).expanduser()
        self.key = key
        self._head = _Head()
        self._lock = threading.Lock()
        self._fd: int | None = None  # the ledger, while an append has it open
        check_ledger_path(self.path)
        _WRITERS.add(self)

    def _reset_after_fork(self) -> None:
        """In a forked child: a fresh lock (one a parent's thread held at the fork stays held for
        good), the head read again (the parent goes on appending), and the child's copy of a ledger
        the parent had open for an append closed: the file lock belongs to the open file, so that
        copy would keep the lock held, and both processes waiting, for as long as the child lives."""
        self._lock = threading.Lock()
        self._head = _Head()
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def append(self, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Sign ``bodies`` into records chained to the current head and append them; returns the records."""
        import fcntl

        if not bodies:
            return []
        with self._lock:
            with _FD_LOCK:  # a fork never comes between the open and the note of it (see _writers_after_fork)
                fd = self._fd = _open_ledger(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                prefix = b""
                records: list[dict[str, Any]] = []
                if (st.st_ino, st.st_size) != (self._head.ino, self._head.size):
                    tail = read_tail(fd, st.st_size, self.key.public_key(), name=f"the ledger {self.path}")
                    self._head = _Head(st.st_ino, st.st_size, tail.hash, tail.seq)
                    if tail.close_line:  # a whole, verified last record that lost its newline
                        prefix = b"\n"
                    if tail.cut is not None:  # a writer stopped mid-line: close the line, say so, link past it
                        prefix = b"\n"
                        records.append(self._sign({"type": "segment", "cut": tail.cut}))
                records.extend(self._sign(dict(b)) for b in bodies)
                lines = [canonical_bytes(r) + b"\n" for r in records]
                data = prefix + b"".join(lines)
                view = memoryview(data)
                try:
                    while view:
                        view = view[os.write(fd, view) :]
                    getattr(os, "fdatasync", os.fsync)(fd)  # the lines and the file's new length on disk
                except OSError as exc:
                    done = len(data) - len(view)
                    whole = _whole_lines(lines, done - len(prefix)) - (len(records) - len(bodies))
                    raise LedgerWriteError(exc, self.path, max(0, whole)) from None
                self._head.size = st.st_size + len(data)
                return records
            except BaseException:
                self._head = _Head()  # read the head again next time
                raise
            finally:
                with _FD_LOCK:
                    os.close(fd)  # also lets go of the file lock
                    self._fd = None

    def check(self) -> None:
        """Refuse now, in one line, what the next append would: a ledger that is not a regular
        file, or whose last line cannot be continued from (blank, not a record, a whole record
        this key did not sign). A ledger not made yet, or cut by a crash, passes."""
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise GroundlensInputError(f"cannot read the ledger {self.path}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            problem = _not_regular(self.path, st.st_mode)
            if problem is not None:
                raise problem
            fcntl.flock(fd, fcntl.LOCK_SH)  # not in the middle of another writer's append
            read_tail(fd, os.fstat(fd).st_size, self.key.public_key(), name=f"the ledger {self.path}")
        finally:
            os.close(fd)

    def _sign(self, body: dict[str, Any]) -> dict[str, Any]:
        rec = dict(body)
        rec.update(
            v=FORMAT,
            id=uuid.uuid4().hex,
            seq=self._head.seq + 1,
            prev=self._head.hash,
            ts=_utc_now(),
            key=self.key.key_id,
        )
        rec["sig"] = base64.b64encode(self.key.sign(canonical_bytes(rec))).decode("ascii")
        self._head.seq = rec["seq"]
        self._head.hash = sha256_hex(canonical_bytes(rec))
        return rec


class LedgerWriteError(OSError):
    """An append the ledger's file did not take (a full disk, an I/O error), naming the ledger.

    ``written`` is how many of the batch's records are whole on the file all the same (a write
    cut short by a full disk leaves the lines before it): the others were not recorded."""

    def __init__(self, exc: OSError, path: Path, written: int):
        super().__init__(exc.errno, exc.strerror or str(exc), str(path))
        self.written = written


def _whole_lines(lines: Sequence[bytes], size: int) -> int:
    """How many of ``lines`` the first ``size`` bytes of their concatenation hold whole."""
    n = 0
    for line in lines:
        size -= len(line)
        if size < 0:
            break
        n += 1
    return n


_WRITERS: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()
_FD_LOCK = threading.Lock()  # held around each open and close of a ledger, and across fork()


def _writers_after_fork() -> None:
    global _FD_LOCK
    _FD_LOCK = threading.Lock()
    for writer in list(_WRITERS):
        writer._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: _FD_LOCK.acquire(),
        after_in_parent=lambda: _FD_LOCK.release(),
        after_in_child=_writers_after_fork,
    )


def _open_ledger(path: Path) -> int:
    """The ledger open for reading and appending. A ledger this creates is owner-only (0600,
    whatever the umask): its records name what was asked and decided. A FIFO or device is
    refused (opened without blocking, never read)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileNotFoundError:  # its folder is made by the first append
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, 0o600)
    except FileExistsError:
        fd = os.open(path, flags)
    problem = _not_regular(path, os.fstat(fd).st_mode)
    if problem is not None:
        os.close(fd)
        raise problem
    return fd


def check_ledger_path(path: Path) -> None:
    """Fail before any scoring when the ledger cannot be appended to (naming the file). Nothing is
    created here: a new ledger is made by its first append."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a new ledger is created without following a link (O_EXCL)
            raise GroundlensInputError(
                f"the ledger {path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                "give the name of the ledger file itself"
            ) from None
        st = None
    except OSError as exc:
        raise GroundlensInputError(f"cannot append to the ledger {path}: {exc.strerror or exc}") from None
    if st is not None:
        problem = _not_regular(path, st.st_mode)
        if problem is not None:
            raise problem
        if not os.access(path, os.R_OK | os.W_OK):
            raise GroundlensInputError(f"cannot append to the ledger {path}: permission denied")
        return
    folder = path.parent  # made by the first append: a run refused before it leaves no folder behind
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise GroundlensInputError(f"cannot append to the ledger {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise GroundlensInputError(f"cannot append to the ledger {path}: its folder is not writable")


@dataclass(frozen=True)
class LedgerTail:
    """Where the next record goes: the last record's hash and seq, and what to write before it.

    ``cut`` describes a line a crash cut short (the next writer closes it with a ``segment``
    record); ``close_line`` is set when the last record is whole and verified but lost its newline
    (the next writer only ends the line)."""

    hash: str = GENESIS
    seq: int = -1
    cut: dict[str, Any] | None = None
    close_line: bool = False


def read_tail(fd: int, size: int, public_key: Any = None, *, name: str = "the ledger") -> LedgerTail:
    """The tail of an open ledger, checked: refuses (one line, naming the line) a last line that
    cannot be continued from: a blank line, a line that is not a record, or a whole record
    without its newline that ``public_key`` did not sign or that does not link to the record
    before it (a crash only ever cuts a record short; a whole record there was put there).

    A last line without its newline that is a proper start of a record is a crash cut: it is
    described by its line number, length and SHA-256 for the segment record that closes it."""
    start, tail = size, b""
    while start > 0 and tail.count(b"\n") < 2:  # the last whole line, and the cut one after it if any
        step = min(start, _TAIL_READ)
        start -= step
        tail = os.pread(fd, step, start) + tail
    piece = None
    if tail and not tail.endswith(b"\n"):
        nl = tail.rfind(b"\n")
        piece = tail[nl + 1 :]
        tail = tail[: nl + 1]
    lines = tail.split(b"\n")[:-1]

    def whole() -> int:  # the number of whole lines (read through the file: only to name a line)
        return _count_lines(fd, size - len(piece or b""))

    prev_hash, prev_seq = GENESIS, -1
    if lines:
        last = lines[-1]
        problem = _not_continued(last, public_key)
        if problem is not None:
            raise GroundlensInputError(f"{name} line {whole()} {problem}")
        prev_seq = int(json.loads(last)["seq"])
        prev_hash = sha256_hex(last)
    if piece is None:
        return LedgerTail(prev_hash, prev_seq)
    if crash_cut(piece):
        cut = {"bytes": len(piece), "sha256": sha256_hex(piece), "line": whole() + 1}
        return LedgerTail(prev_hash, prev_seq, cut=cut)
    rec = _whole_record(piece, public_key, prev_hash, prev_seq)
    if rec is None:
        n = whole()
        raise GroundlensInputError(
            f"{name} line {n + 1} has no line end and is not a record this key signed after line {n}: "
            "a crash only cuts a record short, so it was changed; nothing was appended "
            "(check it with `groundlens verify`)"
        )
    return LedgerTail(sha256_hex(piece), int(rec["seq"]), close_line=True)


def _not_continued(last: bytes, public_key: Any) -> str | None:
    """Why the chain cannot go on from the whole last line ``last``, or None: it must be a record
    in canonical form that ``public_key`` signed. A line anyone could have written (``{"seq": 1000}``,
    a copy of the last record with its band changed) or a record another key signed is never
    continued from: the records chained to it would fail verification with it."""
    from groundlens_core.ledger.keys import _crypto, key_id
    from groundlens_core.ledger.verify import _signature_ok

    check = "; nothing was appended (check it with `groundlens verify`)"
    if not last.strip():
        return "is blank" + check
    rec = _parsed_record(last)
    if rec is None or not isinstance(rec.get("seq"), int) or isinstance(rec.get("seq"), bool):
        return "is not a groundlens record" + check
    if public_key is None or _signature_ok(rec, public_key, _crypto()[2]):
        return None
    mine = key_id(public_key)
    if rec.get("key") != mine and isinstance(rec.get("key"), str):
        return (
            f"is signed by key {rec['key'][:16]}…, not by this signing key {mine[:16]}…; nothing was appended "
            "(sign with the key of this ledger, or give a new ledger file to start another chain)"
        )
    return "is not a record this key signed (an unsigned or changed line)" + check


def _parsed_record(line: bytes) -> dict[str, Any] | None:
    """The record on ``line`` when it is a JSON object of this format in canonical form, else None."""
    from groundlens_core.batch.json_input import too_deep

    if too_deep(line):
        return None
    try:
        rec = json.loads(line)
        if not isinstance(rec, dict) or canonical_bytes(rec) != line:
            return None
    except (ValueError, RecursionError):
        return None
    return rec if rec.get("v") == FORMAT else None


def _whole_record(piece: bytes, public_key: Any, prev_hash: str, prev_seq: int) -> dict[str, Any] | None:
    """The record ``piece`` when it is one in canonical form, signed by ``public_key`` and linked
    to the record before it; otherwise None."""
    from groundlens_core.ledger.keys import _crypto
    from groundlens_core.ledger.verify import _signature_ok

    if public_key is None:
        return None
    rec = _parsed_record(piece)
    if rec is None or rec.get("prev") != prev_hash or rec.get("seq") != prev_seq + 1:
        return None
    return rec if _signature_ok(rec, public_key, _crypto()[2]) else None


def _count_lines(fd: int, upto: int) -> int:
    n, pos = 0, 0
    while pos < upto:
        chunk = os.pread(fd, min(1 << 20, upto - pos), pos)
        if not chunk:
            break
        n += chunk.count(b"\n")
        pos += len(chunk)
    return n
