"""Loopback servers that speak the REST APIs of Langfuse and LangSmith, for the score-sink tests.

The server is the fake; the clients are the vendors' real SDKs (their batching, retries, auth and
serialisation all run). Only the endpoints the sinks reach are answered, as the SDK sources read
them: Langfuse ``POST /api/public/scores`` (a list of scores, 202 ``{"message": "Accepted"}``);
LangSmith ``GET /info``, ``POST /feedback`` (one feedback) and ``POST /runs/multipart`` (the
background batch its client sends when a feedback names its trace: a multipart form whose parts
``feedback.<id>`` are feedback JSON). Anything else is a 404, so a test sees a request it did not
expect.
"""

from __future__ import annotations

import json
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
    return [(part.get_param("name", header="content-disposition"), part.get_payload(decode=True))
            for part in message.iter_parts()]
