"""Signed, hash-chained decision records: an audit trail that shows any edit.

Every scored step or row becomes one JSON line in an append-only ledger. A record holds what was
decided (method, band, scores, the explanation's reason, embedder fingerprint, package version,
time) and SHA-256 hashes of the question, context and response (the texts themselves only when
asked for). Each record names the SHA-256 of the record before it (the first one names the genesis
value) and carries an Ed25519 signature over its canonical bytes (sorted keys, no whitespace,
UTF-8). So a record changed, deleted, inserted, moved or copied breaks the chain or a signature, and
:func:`verify_ledger` names the first line where that happens.

Writers take an exclusive ``fcntl.flock`` on the ledger for each batch: they read the current head
under the lock, append whole lines, ``fsync`` and let go, so two processes appending to one ledger
never interleave and keep one chain. A crash can leave a cut last line; the next writer does not
continue as if nothing happened: it closes the cut line and appends a ``segment`` record that
names it (line number, length, SHA-256) and links to the last whole record.

What this does not prove: whoever holds the private key can rewrite the whole ledger, and cutting
whole records off the end leaves a shorter, valid chain. Publish the public key and keep a copy of
the chain head (``LedgerVerdict.head``) somewhere else if that matters (docs/ledger.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import stat
import threading
import uuid
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from groundlens_core._version import __version__
from groundlens_core.errors import GroundlensInputError

log = logging.getLogger("groundlens.ledger")

FORMAT = "groundlens-ledger/1"
#: what the first record of a ledger names as the record before it
GENESIS = "0" * 64
#: the file names ``groundlens keygen`` writes
PRIVATE_KEY_NAME = "groundlens-signing.key"
PUBLIC_KEY_NAME = "groundlens-signing.pub"
#: the environment settings the recorder reads
ENV_LEDGER = "GROUNDLENS_LEDGER"
ENV_SIGNING_KEY = "GROUNDLENS_SIGNING_KEY"
ENV_LEDGER_TEXT = "GROUNDLENS_LEDGER_TEXT"
#: the ways a ledger can be wrong, as :attr:`LedgerVerdict.problem` names them
PROBLEMS = ("changed", "deleted", "inserted", "reordered", "replayed", "cut_short", "other_key")
_TAIL_READ = 64 * 1024  # bytes read from the end at a time to find the head


# ---------------------------------------------------------------- canonical bytes and hashes


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN: the bytes that are signed and hashed."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8", "surrogatepass"
    )


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_sha256(value: Any) -> str | None:
    """SHA-256 of a text as UTF-8; a list of context pieces is hashed as its pieces joined with a
    blank line (``"\\n\\n"``); None stays None. So anyone holding the texts can check a record."""
    if value is None:
        return None
    return sha256_hex(_as_text(value).encode("utf-8", "surrogatepass"))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n\n".join(_as_text(getattr(v, "text", v)) for v in value)
    return str(value)


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _number(value: Any) -> float | None:
    """A score as JSON can hold it (NaN and infinities are not JSON: None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------- keys


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - an install without the extra
        raise GroundlensInputError(
            'signed ledgers need the cryptography package: pip install "groundlens-core[ledger]"'
        ) from None
    return ed25519, serialization, InvalidSignature


def key_id(public_key: Any) -> str:
    """SHA-256 of the raw 32-byte Ed25519 public key: what each record names as its signer."""
    _, serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_hex(raw)


class SigningKey:
    """An Ed25519 private key read from a file. Its repr and every error name the file, never the key."""

    __slots__ = ("_key", "path", "key_id")

    def __init__(self, key: Any, path: Path):
        self._key = key
        self.path = path
        self.key_id = key_id(key.public_key())

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)

    def public_key(self) -> Any:
        return self._key.public_key()

    def __repr__(self) -> str:
        return f"SigningKey(path={str(self.path)!r}, key_id={self.key_id[:16]!r})"

    def __reduce__(self):  # never pickled into a Ray task, a multiprocessing queue or a log
        raise TypeError("a groundlens SigningKey cannot be pickled; load it from its file where it is used")


def load_signing_key(path: str | os.PathLike[str] | None) -> SigningKey:
    """The private key in ``path`` (PEM, PKCS#8, as ``groundlens keygen`` writes it). A missing,
    unreadable or malformed file is a one-line :class:`GroundlensInputError` naming the file."""
    if path is None or str(path).strip() == "":
        raise GroundlensInputError(
            f"a signed ledger needs a signing key file: --signing-key FILE or {ENV_SIGNING_KEY}=FILE "
            "(make one with `groundlens keygen --out DIR`)"
        )
    p = Path(path).expanduser()
    ed25519, serialization, _ = _crypto()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise GroundlensInputError(f"cannot read the signing key {p}: {exc.strerror or type(exc).__name__}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except Exception:  # the parser's message is not shown: it could quote the file
        key = None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise GroundlensInputError(f"{p} is not an Ed25519 private key in PEM form (make one with `groundlens keygen`)")
    try:
        if os.name == "posix" and stat.S_IMODE(p.stat().st_mode) & 0o077:
            log.warning("groundlens: the signing key %s can be read by other users; chmod 600 it", p)
    except OSError:
        pass
    return SigningKey(key, p)


def load_public_key(path: str | os.PathLike[str]) -> Any:
    """The Ed25519 public key in ``path`` (PEM, as ``groundlens keygen`` writes it)."""
    p = Path(path).expanduser()
    ed25519, serialization, _ = _crypto()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise GroundlensInputError(f"cannot read the public key {p}: {exc.strerror or type(exc).__name__}") from None
    try:
        key = serialization.load_pem_public_key(data)
    except Exception:
        key = None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise GroundlensInputError(f"{p} is not an Ed25519 public key in PEM form")
    return key


def write_keypair(folder: str | os.PathLike[str]) -> tuple[Path, Path, str]:
    """A new key pair in ``folder``: the private key owner-only (0600), the public key beside it.
    Refuses to overwrite either file. Returns (private path, public path, key id)."""
    ed25519, serialization, _ = _crypto()
    out = Path(folder).expanduser()
    private, public = out / PRIVATE_KEY_NAME, out / PUBLIC_KEY_NAME
    for p in (private, public):
        if p.exists() or p.is_symlink():
            raise GroundlensInputError(f"{p} already exists; not overwriting a key (move it away first)")
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise GroundlensInputError(f"cannot create {out}: {exc.strerror or exc}") from None
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_new(private, pem, 0o600)
    try:
        _write_new(public, pub, 0o644)
    except BaseException:
        private.unlink(missing_ok=True)
        raise
    return private, public, key_id(key.public_key())


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    except FileExistsError:
        raise GroundlensInputError(f"{path} already exists; not overwriting a key (move it away first)") from None
    except OSError as exc:
        raise GroundlensInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits away; never adds any: set exactly
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- records


def decision_record(
    *,
    method: str,
    band: str,
    question: Any = None,
    context: Any = None,
    response: Any = None,
    score: Any = None,
    reason: str | None = None,
    step_id: str | None = None,
    row: int | None = None,
    trace_id: str | None = None,
    node: str | None = None,
    fingerprint: str | None = None,
    include_text: bool = False,
) -> dict[str, Any]:
    """The body of one decision record (the writer adds id, chain link, time, key and signature).

    ``score`` is a core score object, its dict, or the ``groundlens_*`` cells of a row. ``reason``
    is the explanation's reason: the explanation of a score with any quoted sentence taken out
    (quotes are the caller's text), the error of an error step or row.
    """
    values = _score_values(score)
    if reason is None:
        reason = values.pop("reason", None)
    else:
        values.pop("reason", None)
    rec: dict[str, Any] = {
        "type": "decision",
        "step_id": step_id,
        "row": row,
        "trace_id": trace_id,
        "node": node,
        "method": method,
        "band": band,
        "scores": {k: values.get(k) for k in ("value", "normalized", "rank", "support")},
        "reason": reason,
        "fingerprint": values.get("fingerprint") or fingerprint,
        "version": __version__,
        "sha256": {
            "question": text_sha256(question),
            "context": text_sha256(context),
            "response": text_sha256(response),
        },
    }
    if include_text:
        rec["text"] = {
            "question": None if question is None else _as_text(question),
            "context": None if context is None else _as_text(context),
            "response": None if response is None else _as_text(response),
        }
    return rec


def _score_values(score: Any) -> dict[str, Any]:
    """value, normalized, rank, support, fingerprint and the reason of a score object, its dict or a
    row's cells. A score object is read field by field: its ``to_dict()`` copies the whole evidence
    and would be most of the ledger's cost on the worker."""
    if score is None:
        return {}
    if isinstance(score, Mapping) and "groundlens_method" in score:  # a row's cells (all a Ray worker sends)
        return {
            "value": _number(score.get("groundlens_value")),
            "normalized": _number(score.get("groundlens_normalized")),
            "rank": _number(score.get("groundlens_rank")),
            "support": _number(score.get("groundlens_support")),
            "reason": score.get("groundlens_error") or None,
        }
    get = score.get if isinstance(score, Mapping) else lambda name: getattr(score, name, None)
    support = get("support")
    evidence = get("evidence")
    if support is None and evidence is not None:  # a support score: its value is the support
        support = evidence.get("support") if isinstance(evidence, Mapping) else getattr(evidence, "support", None)
    return {
        "value": _number(get("value")),
        "normalized": _number(get("normalized")),
        "rank": _number(get("rank")),
        "support": _number(support),
        "fingerprint": get("fingerprint"),
        "reason": _reason(get("explanation"), evidence) if get("explanation") is not None else get("error"),
    }


def _reason(explanation: Any, evidence: Any) -> str | None:
    """The explanation without the caller's text: a quoted response sentence becomes ``"[redacted]"``."""
    if not isinstance(explanation, str):
        return None
    from groundlens_core.results import REDACTED, quote_sentence

    sentences = evidence.get("sentences", ()) if isinstance(evidence, Mapping) else getattr(evidence, "sentences", ())
    for s in sentences or ():
        text = s.get("text") if isinstance(s, Mapping) else getattr(s, "text", None)
        if isinstance(text, str) and text:
            explanation = explanation.replace(f'"{quote_sentence(text)}"', f'"{REDACTED}"')
    return explanation


# ---------------------------------------------------------------- the writer


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
                fd = self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                prefix = b""
                records: list[dict[str, Any]] = []
                if (st.st_ino, st.st_size) != (self._head.ino, self._head.size):
                    head, cut = read_head(fd, st.st_size)
                    self._head = _Head(st.st_ino, st.st_size, *head)
                    if cut is not None:  # a writer stopped mid-line: close the line, say so, link past it
                        prefix = b"\n"
                        records.append(self._sign({"type": "segment", "cut": cut}))
                records.extend(self._sign(dict(b)) for b in bodies)
                data = prefix + b"".join(canonical_bytes(r) + b"\n" for r in records)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                getattr(os, "fdatasync", os.fsync)(fd)  # the lines and the file's new length on disk
                self._head.size = st.st_size + len(data)
                return records
            except BaseException:
                self._head = _Head()  # read the head again next time
                raise
            finally:
                with _FD_LOCK:
                    os.close(fd)  # also lets go of the file lock
                    self._fd = None

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


def check_ledger_path(path: Path) -> None:
    """Fail before any scoring when the ledger cannot be appended to (naming the file)."""
    if path.is_dir():
        raise GroundlensInputError(f"the ledger {path} is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    except OSError as exc:
        raise GroundlensInputError(f"cannot append to the ledger {path}: {exc.strerror or exc}") from None


def read_head(fd: int, size: int) -> tuple[tuple[str, int], dict[str, Any] | None]:
    """((hash, seq) of the last whole record, the cut last line or None) of an open ledger.

    A last line without its newline is cut (a writer stopped in the middle of it); it is described
    by its line number, length and SHA-256 for the segment record that closes it."""
    start, tail = size, b""
    while start > 0 and tail.count(b"\n") < 2:  # the last whole line, and the cut one after it if any
        step = min(start, _TAIL_READ)
        start -= step
        tail = os.pread(fd, step, start) + tail
    cut = None
    if tail and not tail.endswith(b"\n"):
        nl = tail.rfind(b"\n")
        piece = tail[nl + 1 :]
        cut = {"bytes": len(piece), "sha256": sha256_hex(piece), "line": _count_lines(fd, size - len(piece)) + 1}
        tail = tail[: nl + 1]
    lines = tail.split(b"\n")[:-1]
    if not lines:
        return (GENESIS, -1), cut
    last = lines[-1]
    try:
        seq = int(json.loads(last)["seq"])
    except (ValueError, KeyError, TypeError):
        raise GroundlensInputError(
            "the ledger's last whole line is not a groundlens record; check it with `groundlens verify`"
        ) from None
    return (sha256_hex(last), seq), cut


def _count_lines(fd: int, upto: int) -> int:
    n, pos = 0, 0
    while pos < upto:
        chunk = os.pread(fd, min(1 << 20, upto - pos), pos)
        if not chunk:
            break
        n += chunk.count(b"\n")
        pos += len(chunk)
    return n


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

    @classmethod
    def from_env(cls) -> Ledger | None:
        """The ledger ``GROUNDLENS_LEDGER`` names, signed with ``GROUNDLENS_SIGNING_KEY`` (None when unset)."""
        path = os.environ.get(ENV_LEDGER, "").strip()
        if not path:
            return None
        return cls(path, include_text=os.environ.get(ENV_LEDGER_TEXT, "").strip().lower() in ("1", "true", "yes"))

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
                    score=res,
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


# ---------------------------------------------------------------- verification


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
        return {
            "ok": self.ok,
            "records": self.records,
            "head": self.head,
            "problem": self.problem,
            "line": self.line,
            "record_id": self.record_id,
            "detail": self.detail,
            "segments": self.segments,
            "cut_lines": list(self.cut_lines),
            "message": self.message(),
        }


@dataclass
class _Line:
    number: int
    raw: bytes
    record: dict[str, Any] | None  # None unless the line is a JSON object in canonical form
    hash: str
    parsed: Any = None  # the line's JSON, canonical or not (to name a changed record's id)


def _read_lines(path: Path) -> tuple[list[_Line], bool]:
    try:
        data = path.read_bytes()
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
            parsed = json.loads(raw)
            rec = parsed if isinstance(parsed, dict) and canonical_bytes(parsed) == raw else None
        except (ValueError, UnicodeDecodeError):
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
    _, _, invalid_signature = _crypto()
    pub = public_key if hasattr(public_key, "verify") else load_public_key(public_key)
    expected_key = key_id(pub)
    lines, ends_whole = _read_lines(Path(path).expanduser())
    by_hash = {ln.hash: ln.number for ln in lines if ln.record is not None}
    seen: dict[str, int] = {}
    prev_hash, prev_seq, prev_line = GENESIS, -1, 0
    count, segments = 0, 0
    cuts: list[int] = []
    good: set[str] = set()  # hashes of the records checked so far
    after_cut = False

    def bad(ln: _Line, problem: str, detail: str) -> LedgerVerdict:
        found = ln.record if ln.record is not None else ln.parsed
        rid = found.get("id") if isinstance(found, dict) else None
        return LedgerVerdict(
            False, count, None, problem, ln.number, str(rid) if rid else None, detail, segments, tuple(cuts)
        )

    def fits(ln: _Line | None) -> bool:
        r = ln.record if ln is not None else None
        return r is not None and r.get("prev") == prev_hash and r.get("seq") == prev_seq + 1

    i = 0
    while i < len(lines):
        ln = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        rec = ln.record
        # a line a crash cut, closed by the segment record right after it
        cut = (nxt.record or {}).get("cut") if nxt is not None and (nxt.record or {}).get("type") == "segment" else None
        if isinstance(cut, dict) and cut.get("sha256") == ln.hash and cut.get("bytes") == len(ln.raw):
            if cut.get("line") != ln.number:
                return bad(nxt, "changed", f"its segment names line {cut.get('line')} as cut, not line {ln.number}")  # type: ignore[arg-type]
            cuts.append(ln.number)
            after_cut = True
            i += 1
            continue
        if rec is None:
            if nxt is None and not ends_whole:
                return bad(ln, "cut_short", "the last line is incomplete (a writer stopped in the middle of it)")
            if fits(nxt):
                return bad(ln, "inserted", "a line that is not a record of this chain (the chain goes around it)")
            return bad(ln, "changed", "not a groundlens record in canonical form")
        if nxt is None and not ends_whole:
            return bad(ln, "cut_short", "the last line has no line end (a writer stopped before finishing it)")
        rid = str(rec.get("id", ""))
        if rid in seen:
            return bad(ln, "replayed", f"a copy of the record at line {seen[rid]}")
        if not _signature_ok(rec, pub, invalid_signature):
            if fits(nxt):
                return bad(ln, "inserted", "a record this key did not sign (the chain goes around it)")
            if rec.get("key") != expected_key:
                return bad(ln, "other_key", f"signed by key {str(rec.get('key'))[:16]}…, not by {expected_key[:16]}…")
            return bad(ln, "changed", "the signature does not match the record's content")
        if rec.get("v") != FORMAT:
            return bad(ln, "changed", f"unknown record format {rec.get('v')!r}")
        if not (rec.get("prev") == prev_hash and rec.get("seq") == prev_seq + 1):
            later = by_hash.get(str(rec.get("prev")))
            if later is not None and later > ln.number:
                return bad(ln, "reordered", f"it follows the record at line {later}, which comes after it")
            if fits(nxt):
                return bad(ln, "inserted", "a record from elsewhere (the chain goes around it)")
            seq = rec.get("seq")
            if isinstance(seq, int) and seq > prev_seq + 1 and rec.get("prev") not in by_hash:
                missing = seq - prev_seq - 1
                where = f"after line {prev_line}" if prev_line else "at the start"
                return bad(ln, "deleted", f"{missing} record(s) missing {where} (sequence {prev_seq + 1}..{seq - 1})")
            return bad(ln, "changed", "it does not link to the record before it")
        if rec.get("type") == "segment":
            segments += 1
            if rec.get("cut") is not None and not after_cut:
                return bad(ln, "changed", "it names a cut line that is not before it")
        after_cut = False
        seen[rid] = ln.number
        good.add(ln.hash)
        prev_hash, prev_seq, prev_line = ln.hash, int(rec["seq"]), ln.number
        count += 1
        i += 1
    if head is not None and head.strip().lower() not in good:
        return LedgerVerdict(
            False,
            count,
            prev_hash if count else None,
            "deleted",
            detail=f"the chain head {head.strip()[:16]}… kept earlier is not in the ledger: records were "
            "cut off its end, or the chain was rewritten since",
            segments=segments,
            cut_lines=tuple(cuts),
        )
    return LedgerVerdict(True, count, prev_hash if count else None, segments=segments, cut_lines=tuple(cuts))


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
