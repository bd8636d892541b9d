"""Start and stop a real Arize Phoenix server from its own virtualenv (``.phoenix-venv``), for tests.

Phoenix's pins clash with ours, so it lives in a separate venv made by ``.ci/install-phoenix.sh``;
we only talk to it over HTTP (OTLP in, REST out).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("PHOENIX_VENV", REPO / ".phoenix-venv"))
INSTALL_HINT = "bash .ci/install-phoenix.sh"


def phoenix_executable() -> Path | None:
    exe = VENV / "bin" / "phoenix"
    return exe if exe.exists() and (VENV / "bin" / "python").exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _ExitedDuringStartup(RuntimeError):
    pass


def _proc_net_ip(hexaddr: str, width: int) -> str:
    """An address as /proc/net/tcp{,6} writes it (little-endian 32-bit words) in the usual notation."""
    raw = b"".join(bytes.fromhex(hexaddr[i : i + 8])[::-1] for i in range(0, width, 8))
    ip = ipaddress.ip_address(raw)
    return str(getattr(ip, "ipv4_mapped", None) or ip)  # ::ffff:127.0.0.1 (a v6 socket) is 127.0.0.1


class PhoenixServer:
    """``phoenix serve`` on 127.0.0.1 with free ports, a throwaway working dir and no telemetry."""

    def __init__(self, exe: Path, startup_timeout: float = 300.0, attempts: int = 3):
        self.exe = exe
        self.startup_timeout = startup_timeout
        self.attempts = attempts
        self._workdir = tempfile.TemporaryDirectory(prefix="groundlens-phoenix-")
        self.log_path = Path(self._workdir.name) / "phoenix.log"
        self.proc: subprocess.Popen | None = None
        self._pick_ports()

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.grpc_port = free_port()
        while self.grpc_port == self.port:
            self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> PhoenixServer:
        """Start and wait until healthy. A free port can be taken by another process between
        :func:`free_port` and Phoenix binding it (a shared machine): when Phoenix exits during
        start-up saying its address is in use, it is started again on new ports, ``attempts``
        times in all. Any other failure is raised at once."""
        for attempt in range(1, self.attempts + 1):
            try:
                return self._start_once()
            except _ExitedDuringStartup as exc:
                clash = any(t in str(exc).lower() for t in ("address already in use", "failed to bind"))
                if attempt == self.attempts or not clash:
                    raise
                self.proc = None
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self) -> PhoenixServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update({
            "PHOENIX_WORKING_DIR": self._workdir.name,
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_TELEMETRY_ENABLED": "false",
        })
        log = open(self.log_path, "wb")
        # through tests/phoenix_loopback.py: its gRPC receiver on 127.0.0.1 too (Phoenix hard-codes [::])
        launcher = [str(self.exe.parent / "python"), str(Path(__file__).with_name("phoenix_loopback.py")), "serve"]
        self.proc = subprocess.Popen(launcher, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise _ExitedDuringStartup(
                    f"phoenix exited with {self.proc.returncode} during startup:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self._kill()
        raise RuntimeError(f"phoenix was not healthy within {self.startup_timeout:.0f} s:\n{self.log_tail()}")

    def listening(self) -> set[tuple[str, int]]:
        """(address, port) of the listening TCP sockets on this server's HTTP and gRPC ports (/proc)."""
        found = set()
        for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                addr, port = fields[1].split(":")
                if fields[3] == "0A" and int(port, 16) in (self.port, self.grpc_port):  # 0A = LISTEN
                    found.add((_proc_net_ip(addr, width), int(port, 16)))
        return found

    def stop(self) -> None:
        self._kill()
        self._workdir.cleanup()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: only what we started
                self.proc.wait(timeout=20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    # ------------------------------------------------------------ REST

    def get_json(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}{'?' + query if query else ''}", timeout=60) as resp:
            return json.loads(resp.read())

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of a project (GET /v1/projects/{project}/spans, all pages); [] while it doesn't exist."""
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            try:
                page = self.get_json(f"/v1/projects/{urllib.parse.quote(project)}/spans", **params)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return []
                raise
            out.extend(page.get("data") or [])
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def wait_for_spans(self, project: str, count: int, timeout: float = 180.0) -> list[dict[str, Any]]:
        """Phoenix ingests in the background: poll until ``count`` spans are there (or time out).

        A poll that fails on the way (a read time-out or a 5xx from a server busy ingesting on a
        loaded machine) is polled again until the deadline; the last such error is raised if no poll
        ever answered."""
        deadline = time.monotonic() + timeout
        spans: list[dict[str, Any]] = []
        failure: Exception | None = None
        answered = False
        while time.monotonic() < deadline:
            try:
                spans = self.spans(project)
                answered = True
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    raise
                failure = exc
            except (urllib.error.URLError, OSError) as exc:  # time-outs, a reset connection
                failure = exc
            if len(spans) >= count:
                return spans
            time.sleep(0.5)
        if not answered and failure is not None:
            raise failure
        return spans


@contextlib.contextmanager
def running_phoenix() -> Iterator[PhoenixServer]:
    """A started server for a test module, stopped afterwards. Without the Phoenix venv the tests
    skip, except under CI=true, where they fail: CI must run them."""
    import pytest

    exe = phoenix_executable()
    if exe is None:
        msg = f"Arize Phoenix venv not found at {VENV}; create it with: {INSTALL_HINT}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    server = PhoenixServer(exe).start()
    try:
        yield server
    finally:
        server.stop()
