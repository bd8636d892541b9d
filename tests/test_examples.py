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
    # the summary line the README and the LangGraph page show is this demo's
    from groundlens_core.trace import Trace

    summary = Trace.from_json((tmp_path / "trace.json").read_text(encoding="utf-8")).summary()
    for page in ("README.md", "docs/integrations/langgraph.md"):
        (line,) = [x for x in (ROOT / page).read_text(encoding="utf-8").splitlines() if x.startswith("print(trace.summary())  # ")]
        shown = line.split("  # ", 1)[1]
        assert shown.endswith(" ...") and summary.startswith(shown.removesuffix(" ...")), (page, shown, summary)


def test_langgraph_react_agent():
    out = run(["examples/langgraph_react_agent.py"]).stdout
    assert "tool_call skipped" in out and "SGI=" in out and "DGI=" in out


def test_langgraph_react_agent_needs_only_the_langgraph_extra():
    """`[langgraph]` installs langgraph and langchain-core, not `langchain`: the example runs with it unimportable."""
    block = ("import runpy, sys; sys.modules['langchain'] = None; sys.argv = ['langgraph_react_agent.py']; "
             "runpy.run_path('examples/langgraph_react_agent.py', run_name='__main__')")
    out = run(["-c", block]).stdout
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


@pytest.mark.parametrize("example, provider, node", [
    ("anthropic_guard", "anthropic", "anthropic.messages"),
    ("google_guard", "gcp.gemini", "gcp.gemini.generate_content"),
])
def test_provider_guard_examples_offline(tmp_path, example, provider, node):
    """Offline (no API key: the example's own stand-in server), a grounded and a flagged answer, a
    stream, an instrumented tool-using client, and the report."""
    env = {k: "" for k in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")}
    out = run([f"examples/{example}.py", "--out", str(tmp_path)], **env).stdout
    assert "stand-in server" in out and "trusted" in out and "flagged" in out
    assert "GroundlensFlaggedError" in out and "Streamed:" in out and "1 skipped" in out  # the tool_call turn
    traces = json.loads((tmp_path / f"{example.split('_')[0]}_traces.json").read_text(encoding="utf-8"))
    steps = [s for t in traces for s in t["steps"]]
    assert {s["provider"] for s in steps} == {provider} and any(s["node"] == node for s in steps)
    assert {s["triage"] for s in steps} >= {"trusted", "flagged"}
    assert "not verdicts of truth" in (tmp_path / f"{example.split('_')[0]}_report.html").read_text(encoding="utf-8")


def test_openai_guard_prints_a_grounded_and_a_flagged_answer_and_writes_a_report(tmp_path):
    out = run(["examples/openai_guard.py", "--out", str(tmp_path)], OPENAI_API_KEY="", OPENAI_BASE_URL="").stdout
    assert "stand-in server" in out and "trusted" in out and "SGI=" in out
    assert "-> flagged" in out and "mode='raise': GroundlensFlaggedError" in out
    assert "2 steps | 1 review, 1 skipped" in out and "Streamed: It charges" in out  # tool turn + answer
    traces = json.loads((tmp_path / "openai_traces.json").read_text(encoding="utf-8"))
    steps = [s for t in traces for s in t["steps"]]
    assert {s["provider"] for s in steps} == {"openai"} and {"tool_call", "llm"} <= {s["kind"] for s in steps}
    assert any(s["triage"] == "flagged" for s in steps) and any(s["triage"] == "trusted" for s in steps)
    assert "not verdicts of truth" in (tmp_path / "openai_report.html").read_text(encoding="utf-8")
