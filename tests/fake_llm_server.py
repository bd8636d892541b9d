"""A scripted HTTP server on 127.0.0.1 that the real provider SDKs talk to in tests.

The SDK client is real (its transport, retries, SSE decoder and error mapping all run); only the
far end is fake. Each test says what the server answers, per request, and reads back what the SDK
sent::

    server.add(Reply.json({...}))                          # the next request gets this
    server.add(Reply.error(429, headers={"retry-after-ms": "10"}), Reply.json({...}))   # retried
    server.add(Reply.sse(["data: {...}", "data: [DONE]"]))  # an SSE stream, chunked
    server.add(Reply.sse([...], cut_after=2))              # two events, then the socket drops
    server.default = lambda req: Reply.json({...})         # when nothing is queued
    server.requests[-1].json                               # the body the SDK sent

Standard library only: ``http.server.ThreadingHTTPServer`` on an ephemeral loopback port, served
from a daemon thread; ``close()`` (or the context manager) stops it. Each provider's wire format
(OpenAI chat-completion chunks, Anthropic message events, Gemini candidates) is written by that
provider's tests on top of these replies.
"""

from __future__ import annotations

import collections
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Mapping


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str  # with the query string
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass(frozen=True)
class Reply:
    """What to answer one request with."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: SSE events (each already formatted, e.g. ``"data: {...}"`` or ``"event: x\\ndata: {...}"``),
    #: sent as separate chunks of a chunked response; None for a plain body
    events: tuple[str, ...] | None = None
    #: send only this many events, then close the socket without ending the chunked body
    cut_after: int | None = None
    delay: float = 0.0  # seconds to wait before answering (client time-outs)

    @classmethod
    def json(cls, data: Any, status: int = 200, headers: Mapping[str, str] | None = None, delay: float = 0.0) -> Reply:
        return cls(status=status, body=json.dumps(data).encode(), headers={"content-type": "application/json", **(headers or {})},
                   delay=delay)

    @classmethod
    def error(cls, status: int, message: str = "scripted failure", headers: Mapping[str, str] | None = None,
              body: Any = None) -> Reply:
        data = body if body is not None else {"error": {"message": message, "type": "server_error", "code": None}}
        return cls.json(data, status=status, headers=headers)

    @classmethod
    def sse(cls, events: Iterable[str], *, cut_after: int | None = None, headers: Mapping[str, str] | None = None) -> Reply:
        return cls(status=200, events=tuple(events), cut_after=cut_after,
                   headers={"content-type": "text/event-stream", "cache-control": "no-cache", **(headers or {})})


def sse_data(data: Any, event: str | None = None) -> str:
    """One SSE event whose data is ``data`` as JSON (or as it is, for a string like ``[DONE]``)."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {payload}"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its kept-alive connection is normal here; anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FakeLLMServer:
    """Answers each request with the next queued :class:`Reply`, else with ``default(request)``."""

    def __init__(self, default: Callable[[Request], Reply] | None = None):
        self.default = default
        self.requests: list[Request] = []
        self._queue: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, chunked bodies: what the SDKs' httpx expects
            # headers and body leave in separate writes: without TCP_NODELAY, Nagle holds the body
            # back until the client's delayed ACK (~40 ms) on some connections
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                reply = server._next(request)
                if reply.delay:
                    threading.Event().wait(reply.delay)
                if reply.events is None:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, event in enumerate(reply.events):
                    if reply.cut_after is not None and i >= reply.cut_after:
                        self.wfile.flush()
                        self.close_connection = True
                        try:  # drop the connection mid-body: no terminating chunk
                            self.connection.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        return
                    data = (event + "\n\n").encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            do_POST = do_GET = do_PUT = do_DELETE = _handle

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-llm-server", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ scripting

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, *replies: Reply) -> FakeLLMServer:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        if self.default is not None:
            try:
                return self.default(request)
            except Exception as exc:  # a broken script shows as a 599, not a hung test
                return Reply.error(599, f"fake server script failed: {type(exc).__name__}: {exc}")
        return Reply.error(599, "fake server: nothing scripted for this request")

    # ------------------------------------------------------------ life cycle

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
