"""A loopback OTLP/HTTP receiver for tests: keeps the spans (``/v1/traces``) and log records
(``/v1/logs``) it is sent, decoded from protobuf; paths it is told not to serve answer 404, as a
backend without that signal does.

Standard library HTTP on an ephemeral 127.0.0.1 port; the protobuf classes are OpenTelemetry's own.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OTLPReceiver:
    """``with OTLPReceiver() as rx:`` then ``configure_otlp(rx.url)``; ``rx.spans()`` / ``rx.logs()``."""

    def __init__(self, *, serve: tuple[str, ...] = ("/v1/traces", "/v1/logs")):
        self.serve = serve
        self.requests: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver._lock:
                    receiver.requests.append((self.path, body))
                self.send_response(200 if self.path in receiver.serve else 404)
                self.send_header("content-length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)

    def _bodies(self, path: str) -> list[bytes]:
        with self._lock:
            return [body for p, body in self.requests if p == path]

    def _received(self, path: str, request_type: Any) -> list[Any]:
        """Every request sent to ``path``, decoded as ``request_type`` (served or not)."""
        return [request_type.FromString(body) for body in self._bodies(path)]

    def spans(self) -> list[Any]:
        """Every span received (served or not), as ``opentelemetry.proto`` Span messages."""
        requests = self._received("/v1/traces", ExportTraceServiceRequest)
        return [s for req in requests for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def logs(self) -> list[Any]:
        """Every log record received, as ``opentelemetry.proto`` LogRecord messages."""
        requests = self._received("/v1/logs", ExportLogsServiceRequest)
        return [r for req in requests for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records]


def attributes(message: Any) -> dict[str, Any]:
    """A protobuf span's or log record's attributes as a plain dict (scalar values)."""
    out = {}
    for kv in message.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind) if kind else None
    return out
