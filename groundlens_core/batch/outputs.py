"""The one way groundlens writes a file the user asked for (evaluate, calibrate, report, trace.save).

Why one writer: a command that writes over its own input destroys the user's data, a write cut
short by a full disk must not leave the previous file truncated, and a FIFO given as the output
must not hang. Every output therefore goes through :func:`check_target` (before any work, so a
refusal costs nothing) and :func:`replacing` / :func:`write_text` (a temporary file beside the
target, renamed over it only when complete).

Guarantees:

- the target is never one of the inputs: same path, a symlink or a hard link to it (compared by
  device and inode) is a one-line :class:`~groundlens_core.errors.GroundlensInputError`;
- a directory, FIFO, socket or device as the target is refused the same way (nothing is opened);
- the new file gets the existing file's mode and group, or for a new file the mode a plain
  ``open(path, "w")`` gives (0666 minus the umask);
- an OS error names the target (``[Errno 28] No space left on device: 'out.csv'``), the temporary
  file is removed and the previous file is left as it was.
"""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from groundlens_core.errors import GroundlensInputError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


def mode_kind(mode: int) -> str | None:
    """None for a regular file's ``st_mode``, else what it is ("a FIFO (named pipe)", "a device" ...):
    a FIFO or a device would hang a read or never end it, a directory is no file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """``"a directory"``, ``"a FIFO (named pipe)"``, ... when ``path`` exists and is not a regular
    file (symlinks followed); None for a regular file or a path that does not exist."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return mode_kind(mode)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when ``a`` and ``b`` name one file: the same path, a symlink or a hard link."""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, RuntimeError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_target(
    target: str | os.PathLike[str], *, what: str = "the output", inputs: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """Refuse, in one line and before any work, a target that is an input or not a regular file,
    or whose folder cannot take a new file. Creates missing parent folders. Returns the target."""
    target = Path(target)
    for src in inputs:
        if same_file(src, target):
            raise GroundlensInputError(
                f"{what} {target} is the input file {src}; write to another file (an input is never overwritten)"
            )
    _refuse_special(target, what)
    try:
        os.unlink(_temp_beside(target, ".probe"))
    except OSError as exc:
        raise GroundlensInputError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
    return target


def _refuse_special(target: Path, what: str) -> None:
    kind = special_kind(target)
    if kind is not None:
        raise GroundlensInputError(f"{what} {target} is {kind}; give the name of a regular file")


def _temp_beside(target: Path, suffix: str) -> str:
    """A new empty hidden file in ``target``'s folder (created with its parents when missing)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=str(target.parent))
    os.close(fd)
    return name


HTML_SUFFIXES = (".html", ".htm")


def check_html_target(target: str | os.PathLike[str], *, what: str = "the HTML report") -> Path:
    """Refuse to replace an existing file whose name is not ``.html``/``.htm`` with a report: a
    mistyped name (a key, a config file) would otherwise be lost. A new file of any name is fine."""
    target = Path(target)
    if os.path.lexists(target) and target.suffix.lower() not in HTML_SUFFIXES:
        raise GroundlensInputError(
            f"{what} {target} would replace an existing file that is not an .html file; "
            "give a new name or one ending in .html"
        )
    return target


def check_input_file(path: str | os.PathLike[str], *, what: str = "input file") -> Path:
    """Refuse, in one line, an input that is a directory, FIFO, socket or device (reading a FIFO
    waits for a writer forever) or that does not exist. Returns the path."""
    path = Path(path)
    kind = special_kind(path)
    if kind is not None:
        raise GroundlensInputError(f"{what} {path} is {kind}; give a regular file")
    if not path.is_file():
        raise GroundlensInputError(f"{what} not found: {path}")
    return path


def refuse_link(path: str | os.PathLike[str], role: str, output: str | os.PathLike[str]) -> None:
    """Refuse a symbolic link where groundlens keeps one of its own files beside ``output``: writing
    through it would overwrite whatever it points at (the input, a key, any file)."""
    if os.path.islink(path):
        raise GroundlensInputError(
            f"{path} is a symbolic link where groundlens keeps the {role} of {output}; "
            "remove it and run again (it is never followed)"
        )


def open_own(
    path: str | os.PathLike[str], flags: int, role: str, output: str | os.PathLike[str], *, fresh: bool = False
) -> int:
    """A descriptor for one of groundlens' own files beside ``output``, never through a planted link.

    ``fresh``: whatever is at ``path`` is removed (a link is removed, not followed) and a new file is
    created exclusively. Otherwise the file is opened with ``O_NOFOLLOW`` (created if ``flags`` say
    so) and must be a regular file with no other name: a hard link to another file is refused, as
    writing to it would change that file too."""
    path = Path(path)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if fresh:
        remove_entry(path)
        flags |= os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags | nofollow | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as exc:
        if os.path.islink(path):
            refuse_link(path, role, output)
        raise with_path(exc, path) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a hard link to another file"
        raise GroundlensInputError(
            f"{path} is {why} where groundlens keeps the {role} of {output}; remove it and run again"
        )
    if not fresh and nofollow == 0 and os.path.islink(path):  # no O_NOFOLLOW on this system
        os.close(fd)
        refuse_link(path, role, output)
    return fd


def remove_entry(path: Path, *, ignore_errors: bool = False) -> None:
    """Remove ``path`` itself: a file or link is unlinked (never its target), a folder removed
    (``ignore_errors``: whatever of the folder cannot be removed is left, without an error)."""
    import shutil

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=ignore_errors)
    else:
        path.unlink(missing_ok=True)


def with_path(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` naming ``path`` (a write error on a temporary file, or one with no file name at all,
    says which file the user asked for)."""
    if exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))


def umask() -> int:
    """The process umask, read without changing it where the system allows (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def adopt_attributes(path: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Give ``path`` (about to replace ``target``) the existing target's mode and group, or the mode
    a plain ``open(target, "w")`` would give when there is no target yet."""
    try:
        st = os.stat(target)
    except OSError:
        os.chmod(path, 0o666 & ~umask())
        return
    if os.stat(path).st_gid != st.st_gid:
        try:
            os.chown(path, -1, st.st_gid)
        except OSError:  # not a member of that group: the mode is still kept
            pass
    os.chmod(path, stat.S_IMODE(st.st_mode))


@contextmanager
def replacing(target: str | os.PathLike[str], *, what: str = "the output") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; when the block ends normally it is synced, given
    the target's mode and group, and renamed over the target. On any failure the temporary file
    is removed, the target is left as it was, and an OS error names the target."""
    target = Path(target)
    _refuse_special(target, what)
    try:
        name = _temp_beside(target, ".tmp")
    except OSError as exc:
        raise with_path(exc, target) from None
    tmp = Path(name)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        adopt_attributes(tmp, target)
        os.replace(tmp, target)
    except OSError as exc:
        _discard(tmp)
        raise with_path(exc, target) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: Path) -> None:
    try:
        tmp.unlink(missing_ok=True)
    except OSError:  # the error being reported matters more than a leftover temporary file
        pass


def write_text(target: str | os.PathLike[str], text: str, *, what: str = "the output") -> Path:
    """Write ``text`` as UTF-8 through :func:`replacing`. Lone surrogates (undecodable bytes that
    reached a trace) are written escaped, not refused."""
    with replacing(target, what=what) as tmp:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
    return Path(target)


class OutputLock:
    """One writer per output: a lock file beside it, held for the whole run.

    Held with ``flock`` where the system has it: the kernel lets go when the holder exits, however
    it dies, so a killed run's leftover lock file never blocks a later one. The holder writes its
    process id into the file, so a second run is told which process to wait for. Elsewhere the file
    is created exclusively and a leftover whose process is gone is taken over."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, path: str | os.PathLike[str], output: str | os.PathLike[str]) -> OutputLock:
        path = Path(path)
        for _ in range(100):  # each retry follows a lock file removed by the run that just ended
            try:
                lock = cls._try(path, output)
            except OSError as exc:
                raise GroundlensInputError(f"cannot lock the output {output} ({path}): {exc.strerror or exc}") from None
            if isinstance(lock, OutputLock):
                return lock
            if lock is not None:
                raise GroundlensInputError(
                    f"another groundlens run ({lock}) is writing {output} (lock {path.name} beside it); "
                    "wait for it to end or stop it, then run again"
                )
        raise GroundlensInputError(f"cannot lock the output {output}: {path} keeps changing")

    @classmethod
    def _try(cls, path: Path, output: str | os.PathLike[str]) -> OutputLock | str | None:
        """The lock, or a description of its holder, or None to try again."""
        try:
            import fcntl
        except ImportError:  # not POSIX
            return cls._try_exclusive(path, output)
        fd = open_own(path, os.O_RDWR | os.O_CREAT, "lock", output)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            return holder
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it between our open and our lock
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return cls(path, fd)

    @classmethod
    def _try_exclusive(cls, path: Path, output: str | os.PathLike[str]) -> OutputLock | str | None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except FileExistsError:
            refuse_link(path, "lock", output)
            try:
                pid = int(path.read_text(encoding="ascii").strip())
                os.kill(pid, 0)
            except (OSError, ValueError):
                path.unlink(missing_ok=True)  # its process is gone
                return None
            return f"pid {pid}"
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        return cls(path, fd)

    def release(self) -> None:
        """Remove the lock file, then let go of it (in this order, so no run can hold a file that
        is no longer the lock)."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self.fd)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "a process that has not written its id yet"
