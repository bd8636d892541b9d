"""Every example runs offline, as a user would start it, and says what it promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HOME": tempfile.mkdtemp(prefix="groundlens-example-home-"), **env}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env=full_env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_langgraph_rag_demo_writes_report_and_trace(tmp_path):
    out = run(["examples/langgraph_rag.py", "--out", str(tmp_path)]).stdout
    assert "review first (riskiest first)" in out and "flagged" in out
    trace = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))
    assert trace["framework"] == "langgraph" and any(s["method"] == "sgi" for s in trace["steps"])
    assert "not verdicts of truth" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_langgraph_react_agent():
    out = run(["examples/langgraph_react_agent.py"]).stdout
    assert "tool_call skipped" in out and "SGI=" in out and "DGI=" in out


def test_crewai_self_check_revises_after_a_flag(tmp_path):
    out = run(["examples/crewai_self_check.py", "--out", str(tmp_path)],
              CREWAI_DISABLE_TELEMETRY="true", CREWAI_TRACING_ENABLED="false", CREWAI_DISABLE_VERSION_CHECK="true").stdout
    assert out.index("FLAGGED") < out.index("TRUSTED") and "Final answer:" in out
    assert (tmp_path / "crewai_trace.json").is_file()


def test_semantic_kernel_filter_modes():
    out = run(["examples/semantic_kernel_filter.py"]).stdout
    assert "annotate" in out and "held back for human review" in out and "GroundlensFlaggedError" in out


def test_autogen_team_stops_on_a_flagged_answer():
    out = run(["examples/autogen_team.py"]).stdout
    assert "groundlens flagged the answer of researcher" in out


def test_otel_export_with_the_backend_down_keeps_the_trace(tmp_path):
    saved = tmp_path / "t.json"
    proc = run(["examples/otel_export.py", "--recorder", "--live", "--save", str(saved)],
               OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert "live-exported trace" in proc.stdout and saved.is_file()
    assert proc.stderr.count("groundlens: could not export") == 1
