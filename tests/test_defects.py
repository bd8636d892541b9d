"""Failures that must stay contained: a broken tracer or logger provider, a dead OTLP endpoint, a
failed shipment reported by the OTel example, and written files that honour the umask."""

from __future__ import annotations

import logging
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langgraph.graph import END, START, StateGraph

from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
from groundlens_core.trace import CallRecord, Recorder, Trace
from groundlens_core.trace.html import write_html
from groundlens_core.trace.otel import OTelExporter, configure_otlp, export_failures

ROOT = Path(__file__).resolve().parents[1]


class BrokenTracerProvider:
    def get_tracer(self, *args, **kwargs):
        raise RuntimeError("tracer provider exploded")


class BrokenLoggerProvider:
    def get_logger(self, *args, **kwargs):
        raise RuntimeError("logger provider exploded")


class State(TypedDict, total=False):
    question: str
    answer: str


def one_node_graph():
    model = GenericFakeChatModel(messages=iter(["Paris is the capital of France."]))
    g = StateGraph(State)
    g.add_node("answer", lambda s: {"answer": model.invoke([("human", s["question"])]).content})
    g.add_edge(START, "answer")
    g.add_edge("answer", END)
    return g.compile()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# 1 ------------------------------------------------------------------ a broken tracer/logger provider


def test_a_broken_tracer_provider_never_stops_the_graph(caplog, dgi_calibration):
    caplog.set_level(logging.WARNING)
    cb = GroundlensLangGraphCallback(tracer_provider=BrokenTracerProvider(), calibration=dgi_calibration)
    out = one_node_graph().invoke({"question": "What is the capital of France?"}, config={"callbacks": [cb]})
    assert out["answer"] == "Paris is the capital of France."
    assert [s.method for s in cb.get_trace().steps] == ["dgi"]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "tracer provider exploded" in warnings[0].getMessage()


def test_the_exporter_survives_broken_providers(caplog):
    caplog.set_level(logging.WARNING)
    exporter = OTelExporter(tracer_provider=BrokenTracerProvider(), logger_provider=BrokenLoggerProvider())
    recorder = Recorder("test", listeners=[exporter])
    recorder.record(CallRecord("k", "lookup", kind="tool", response="facts"))
    recorder.end_trace("k")
    assert recorder.flush() and recorder.get_trace("k").steps[0].node == "lookup"
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(messages) == 2 and "tracer provider exploded" in messages[0] and "logger provider exploded" in messages[1]


# 2 ------------------------------------------------------------------ one warning per dead endpoint


def test_a_dead_endpoint_is_one_warning_in_all(caplog):
    caplog.set_level(logging.DEBUG, logger="opentelemetry")
    caplog.set_level(logging.WARNING)
    provider = configure_otlp(f"http://127.0.0.1:{_closed_port()}", timeout=1.0)
    tracer = provider.get_tracer("test")
    for _ in range(3):
        tracer.start_span("a").end()
        provider.force_flush(10_000)
    provider.shutdown()
    lines = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines  # not an OTel warning + an OTel error + ours
    assert lines[0].startswith("groundlens.otel: groundlens: could not export spans")
    assert export_failures(provider) == 3


# 3 ------------------------------------------------------------------ the example says when shipping failed


def test_otel_example_reports_a_failed_shipment(tmp_path):
    saved = tmp_path / "trace.json"
    Trace(id="t1", name="saved", framework="test", started_at="2025-01-02T03:04:05Z",
          ended_at="2025-01-02T03:04:06Z").save(saved)
    proc = subprocess.run([sys.executable, "examples/otel_export.py", "--load", str(saved),
                           "--endpoint", f"http://127.0.0.1:{_closed_port()}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("could not ship") and "OTel trace id" not in proc.stdout


# 4 ------------------------------------------------------------------ files we write honour the umask


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    trace = Trace(id="t1", name="modes", framework="test", started_at="2025-01-02T03:04:05Z")
    old = os.umask(umask)
    try:
        trace.save(tmp_path / "trace.json")
        write_html([trace], tmp_path / "report.html")
        trace.to_html(path=tmp_path / "original.html")
    finally:
        os.umask(old)
    for name in ("trace.json", "report.html", "original.html"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name
    (tmp_path / "trace.json").chmod(0o640)  # a replaced file keeps the mode its owner gave it
    trace.save(tmp_path / "trace.json")
    assert stat.S_IMODE((tmp_path / "trace.json").stat().st_mode) == 0o640
