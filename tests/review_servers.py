"""Loopback servers that speak the REST APIs of Langfuse and LangSmith, for the score-sink tests.

The server is the fake; the clients are the vendors' real SDKs (their batching, retries, auth and
serialisation all run). Only the endpoints the sinks reach are answered, as the SDK sources read
them: Langfuse ``POST /api/public/scores`` (a list of scores, 202 ``{"message": "Accepted"}``);
LangSmith ``GET /info``, ``POST /feedback`` (one feedback) and ``POST /runs/multipart`` (the
background batch its client sends when a feedback names its trace: a multipart form whose parts
``feedback.<id>`` are feedback JSON). Anything else is a 404, so a test sees a request it did not
expect. :class:`SilentServer` accepts and never answers (a backend that hangs).
"""

from __future__ import annotations

import json
import socket
import threading
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fake_llm_server import FakeLLMServer, Reply, Request


class LangfuseServer(FakeLLMServer):
    """Langfuse's public API, as far as scores go."""

    def __init__(self) -> None:
        super().__init__(default=self._answer)
        self.scores: list[dict[str, Any]] = []

    def _answer(self, request: Request) -> Reply:
        if request.method == "POST" and request.path.split("?")[0] == "/api/public/scores":
            if not request.headers.get("authorization", "").startswith("Basic "):
                return Reply.json({"message": "unauthorized"}, status=401)
            body = request.json
            self.scores.extend(body if isinstance(body, list) else [body])
            return Reply.json({"message": "Accepted"}, status=202)
        return Reply.json({"message": f"not found: {request.method} {request.path}"}, status=404)


class LangSmithServer(FakeLLMServer):
    """LangSmith's API, as far as feedback goes."""

    def __init__(self) -> None:
        super().__init__(default=self._answer)
        self.feedback: list[dict[str, Any]] = []

    def _answer(self, request: Request) -> Reply:
        path = request.path.split("?")[0]
        if request.method == "GET" and path == "/info":
            return Reply.json({"version": "0.10.0", "instance_flags": {}})
        if request.method == "POST" and path == "/feedback":
            if not request.headers.get("x-api-key"):
                return Reply.json({"detail": "unauthorized"}, status=401)
            body = json.loads(request.body)
            self.feedback.append(body)
            return Reply.json(body)
        if request.method == "POST" and path == "/runs/multipart":
            if not request.headers.get("x-api-key"):
                return Reply.json({"detail": "unauthorized"}, status=401)
            for name, data in _form_parts(request):
                if name.startswith("feedback."):
                    self.feedback.append(json.loads(data))
            return Reply.json({}, status=202)
        return Reply.json({"detail": f"not found: {request.method} {request.path}"}, status=404)


def _form_parts(request: Request) -> list[tuple[str, bytes]]:
    """(name, body) of each part of a ``multipart/form-data`` request (the standard library's MIME parser)."""
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + request.body)
    return [
        (part.get_param("name", header="content-disposition"), part.get_payload(decode=True))
        for part in message.iter_parts()
    ]


class SilentServer:
    """A loopback server that accepts every connection and reads what is sent, and never answers:
    a backend that hangs. ``connections`` counts what it accepted; ``close()`` (or the context
    manager) drops them all."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._open: list[socket.socket] = []
        self._closed = threading.Event()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        conn.settimeout(0.1)
        while not self._closed.is_set():
            try:
                if not conn.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._listener.close()
        for conn in self._open:
            conn.close()

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
