"""Ed25519 signing keys for ledgers: generate, load (with a warning on loose file modes), identify."""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

from groundlens_core.batch.outputs import mode_kind
from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger.records import sha256_hex

log = logging.getLogger("groundlens.ledger")

#: the file names ``groundlens keygen`` writes
PRIVATE_KEY_NAME = "groundlens-signing.key"
PUBLIC_KEY_NAME = "groundlens-signing.pub"
#: the environment setting that names the signing key
ENV_SIGNING_KEY = "GROUNDLENS_SIGNING_KEY"
#: the most a key file is read: a PEM Ed25519 key is a few hundred bytes
KEY_FILE_CAP = 16 * 1024
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{40,}")


def _key_text_given(value: str) -> str | None:
    """What was given instead of a path when ``value`` looks like key material (never echoed):
    a PEM text, several lines, or a long run of base64 that names no file."""
    if "PRIVATE KEY" in value or "BEGIN" in value or "-----" in value:
        return "a PEM text was given"
    if "\n" in value or "\r" in value or len(value) > 512:
        return "a text that is not a file name was given"
    looks_like_path = value.startswith(("/", "~", "."))
    if _BASE64_RUN.fullmatch(value.strip()) and not looks_like_path and not os.path.lexists(value):
        return "a text that looks like key material was given"
    return None


def _read_key_file(path: str | os.PathLike[str], what: str) -> tuple[Path, bytes]:
    """The bytes of a key file: a regular file of at most :data:`KEY_FILE_CAP` bytes. A value that
    looks like the key itself (``--signing-key "$(cat key)"``) is refused without being shown, and
    a FIFO or device is refused without being read (it would hang or never end)."""
    given = _key_text_given(os.fspath(path))
    if given is not None:
        raise GroundlensInputError(f"{what} must be a path to a key file ({given}; it is not shown)")
    p = Path(path).expanduser()
    try:
        kind = mode_kind(os.stat(p).st_mode)
        if kind is not None:
            raise GroundlensInputError(f"cannot read {what} {p}: it is {kind}, not a key file")
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GroundlensInputError(f"cannot read {what} {p}: {exc.strerror or type(exc).__name__}") from None
    try:
        kind = mode_kind(os.fstat(fd).st_mode)  # swapped for a FIFO since the check: still refused
        if kind is not None:
            raise GroundlensInputError(f"cannot read {what} {p}: it is {kind}, not a key file")
        chunks, total = [], 0
        while total <= KEY_FILE_CAP:
            chunk = os.read(fd, KEY_FILE_CAP + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise GroundlensInputError(f"cannot read {what} {p}: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)
    if total > KEY_FILE_CAP:
        raise GroundlensInputError(f"{p} is too large to be {what} file (more than {KEY_FILE_CAP // 1024} KB)")
    return p, b"".join(chunks)


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
    ed25519, serialization, _ = _crypto()
    p, data = _read_key_file(path, "the signing key")
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
    ed25519, serialization, _ = _crypto()
    p, data = _read_key_file(path, "the public key")
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
