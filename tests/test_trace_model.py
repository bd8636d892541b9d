"""The trace model and recorder: JSON round trip, schema, redaction, summaries, concurrency, failures."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import jsonschema
import pytest

from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Trace, Usage
from groundlens_core.trace.model import json_schema

CTX = "The Oberoi family is an Indian family famous for hotels. The Oberoi Group is a hotel company with its head office in Delhi."
Q = "The Oberoi family is part of a hotel company that has a head office in what city?"


def _record_run(rec: Recorder, key: str = "run-1") -> None:
    t = time.time()
    rec.start_trace(key, name="rag", metadata={"user": "test"})
    rec.record(CallRecord(key, "retrieve", kind="retrieval", response=CTX))
    rec.record(CallRecord(key, "answer", question=Q, response="The Oberoi Group's head office is in Delhi, India.",
                          context=[ContextPiece(CTX, "retriever")], model="fake-model", provider="test",
                          usage=Usage(10, 5, 15), started_at=t, ended_at=t + 0.25))
    rec.record(CallRecord(key, "answer", question=Q, response="Many hotel companies are headquartered in large cities around the world.",
                          context=[CTX], model="fake-model"))
    rec.record(CallRecord(key, "chat", question="What is the capital of France?", response="Paris is the capital of France."))
    rec.record(CallRecord(key, "agent", kind="tool_call", question="x", response=""))
    rec.record(CallRecord(key, "llm", question="q", response="r", error="RateLimitError: slow down"))
    rec.end_trace(key)


@pytest.fixture(scope="module")
def trace() -> Trace:
    rec = Recorder("test", name="unit")
    _record_run(rec)
    return rec.get_trace()


def test_steps_methods_and_order(trace):
    assert [s.index for s in trace.steps] == list(range(6))
    assert [s.method for s in trace.steps] == ["skipped", "sgi", "sgi", "dgi", "skipped", "error"]
    assert trace.steps[4].skip_reason == "the model only called tools"
    assert trace.steps[5].error.startswith("RateLimitError") and trace.steps[5].triage == "error"
    grounded, off = trace.steps[1], trace.steps[2]
    assert grounded.value > off.value
    assert grounded.llm_latency_ms == pytest.approx(250, abs=1) and grounded.scoring_latency_ms > 0
    assert grounded.usage == Usage(10, 5, 15)
    assert trace.fingerprint and trace.ended_at and trace.metadata == {"user": "test"}
    assert off.context == (ContextPiece(CTX, "context"),)


def test_summary_counts_and_riskiest(trace):
    counts = trace.counts()
    assert sum(counts.values()) == 6 and counts["error"] == 1 and counts["skipped"] == 2
    line = trace.summary()
    assert line.startswith("6 steps | ") and "answer [score=" in line and ", SGI=" in line
    assert "chat [score=" in line and "(no context), DGI=" in line  # no context: a weak signal, said so
    risky = trace.riskiest()
    assert risky[0].method == "error"
    scored = trace.riskiest(scored_only=True)
    order = {"flagged": 0, "review": 1, "trusted": 2}
    keys = [(order[s.triage], s.score) for s in scored]
    assert keys == sorted(keys)
    shown = [s.score for s in scored]  # the score shown is the score ranked: it rises along the order
    assert shown == sorted(shown)


def test_json_round_trip_and_schema(trace):
    schema = json_schema()
    data = trace.to_dict()
    jsonschema.validate(data, schema)
    again = Trace.from_json(trace.to_json())
    assert again == trace and again.to_json() == trace.to_json()
    for kwargs in ({"redact": True}, {"max_text_chars": 10}):
        shrunk = trace.to_dict(**kwargs)
        jsonschema.validate(shrunk, schema)
        assert Trace.from_dict(shrunk).to_dict() == shrunk
    bad = trace.to_dict()
    bad["steps"][0]["kind"] = "banana"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_a_step_holds_its_result_and_its_score_is_the_number(trace):
    grounded = trace.steps[1]
    assert grounded.score == grounded.result.score and isinstance(grounded.score, float)
    assert trace.steps[0].result is None and trace.steps[0].score is None  # skipped: no result, no score
    with pytest.warns(DeprecationWarning, match="use .score"):
        assert grounded.rank == grounded.score
    with pytest.warns(DeprecationWarning, match=r"step\.result\.value"):
        assert grounded.score.value == grounded.value  # code from when step.score was the result object
    step = trace.to_dict()["steps"][1]
    assert step["result"] == grounded.result.to_dict() and "score" not in step


def test_a_file_whose_steps_hold_the_result_under_score_still_reads(trace, tmp_path, capsys):
    from groundlens_core.cli import main
    from groundlens_core.trace.schema_check import schema_problem

    old = trace.to_dict()
    old["schema_version"] = "1.2"
    for step in old["steps"]:
        step["score"] = step.pop("result")
    jsonschema.validate(old, json_schema())
    assert schema_problem(old, json_schema()) is None
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    again = Trace.load(path)
    assert [s.result for s in again.steps] == [s.result for s in trace.steps]
    assert [s.score for s in again.steps] == [s.score for s in trace.steps]
    assert again.to_dict()["steps"] == trace.to_dict()["steps"]  # written back under "result"
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    neither = {**old["steps"][1]}
    del neither["score"]
    assert "missing the field 'result'" in schema_problem({**old, "steps": [neither]}, json_schema())


def test_redaction_keeps_hash_and_length_only(trace):
    text = trace.to_json(redact=True)
    assert "Delhi" not in text and "headquartered" not in text
    step = trace.to_dict(redact=True)["steps"][1]
    assert step["response"]["redacted"] is True and step["response"]["length"] == len("The Oberoi Group's head office is in Delhi, India.")
    assert len(step["context"][0]["text"]["hmac_sha256"]) == 64


def test_cutting_records_full_length(trace):
    step = trace.to_dict(max_text_chars=10)["steps"][1]
    assert step["context"][0]["text"] == {"text": CTX[:10], "truncated": True, "length": len(CTX)}


def test_one_trace_per_key_and_concurrent_threads():
    rec = Recorder("test")
    def worker(n):
        for i in range(5):
            rec.record(CallRecord(f"t{n}", f"node{n}", question=f"Question {n} {i}?", response=f"Answer {n} {i}.", context=[CTX]))
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    traces = rec.get_traces()
    assert len(traces) == 6
    for tr in traces:
        assert [s.index for s in tr.steps] == list(range(5))
        assert {s.node for s in tr.steps} == {tr.steps[0].node} and all(s.method == "sgi" for s in tr.steps)


async def test_record_from_asyncio_tasks_returns_at_once(monkeypatch):
    """No scoring on the caller's path (the model loads on the worker): the scoring is held until
    every record() has returned, so a record() that waited for a score could only return once the
    hold gave up (60 s), which the test sees. (A bound on record()'s time in seconds failed when a
    loaded machine preempted the caller's thread.)"""
    import groundlens_core.scoring as scoring

    real = scoring.evaluate_batch
    all_recorded = threading.Event()
    scoring_threads: list[threading.Thread] = []
    held_too_long: list[bool] = []

    def held_scoring(*args, **kwargs):
        scoring_threads.append(threading.current_thread())
        held_too_long.append(not all_recorded.wait(60))
        return real(*args, **kwargs)

    monkeypatch.setattr(scoring, "evaluate_batch", held_scoring)
    rec = Recorder("test")

    async def task(n):
        rec.record(CallRecord("async", f"n{n}", question="What is the capital of France?", response=f"Paris ({n})."))
        await asyncio.sleep(0)

    await asyncio.gather(*(task(n) for n in range(20)))
    all_recorded.set()
    trace = await asyncio.to_thread(rec.get_trace, "async")
    assert len(trace.steps) == 20 and all(s.method == "dgi" for s in trace.steps)
    assert scoring_threads and threading.current_thread() not in scoring_threads and not any(held_too_long)


def test_scoring_failure_becomes_error_steps_not_exceptions():
    class Broken:
        model_id = backend = "broken"
        dim, max_tokens = 384, 254
        fingerprint = "broken"

        def encode(self, texts):
            raise RuntimeError("embedder exploded")

        def count_tokens(self, text):
            return 1

        def split(self, text, max_tokens=None):
            return [text]

    rec = Recorder("test", embedder=Broken())
    rec.record(CallRecord("k", "n", question="q?", response="r.", context=[CTX]))
    step = rec.get_trace().steps[0]
    assert step.method == "error" and "embedder exploded" in step.error


def test_listener_failure_is_contained(internal_errors_logged, caplog):
    class Bad:
        def on_step(self, trace, step):
            raise ValueError("listener bug")

    rec = Recorder("test", listeners=[Bad()])
    rec.record(CallRecord("k", "n", kind="tool", response="tool output"))
    assert rec.get_trace().steps[0].method == "skipped"
    assert any("listener bug" in r.getMessage() for r in caplog.records)


def test_trace_that_ends_with_error_keeps_steps():
    rec = Recorder("test")
    rec.record(CallRecord("k", "n", kind="tool", response="tool output"))
    rec.end_trace("k", error="ValueError: graph failed")
    tr = rec.get_trace()
    assert tr.status == "error" and tr.error.startswith("ValueError") and len(tr.steps) == 1


def test_worker_thread_limit_leaves_the_callers_torch_threads_alone():
    import torch

    before = torch.get_num_threads()
    seen = []

    class Probe:
        def on_step(self, trace, step):
            seen.append(torch.get_num_threads())  # listeners run on the worker thread

    rec = Recorder("test", listeners=[Probe()], worker_torch_threads=1)
    rec.record(CallRecord("k", "n", question="What is the capital of France?", response="Paris."))
    assert rec.get_trace().steps[0].method == "dgi"
    assert seen == [1] and torch.get_num_threads() == before


def test_redaction_covers_cut_texts_errors_and_metadata(tmp_path):
    secret = "John Doe, account 12345"
    rec = Recorder("test")
    rec.start_trace("k", metadata={"inputs": secret})
    rec.record(CallRecord("k", "n", question=f"What about {secret}?", response=f"{secret} is fine." * 20, context=[secret * 3],
                          metadata={"tool_calls": [{"args": secret}]}))
    rec.record(CallRecord("k", "n", question="q", response="r", error=f"ToolError: {secret} not found"))
    rec.end_trace("k", error=f"ValueError: {secret}")
    trace = rec.get_trace("k")
    cut = tmp_path / "cut.json"
    trace.save(cut, max_text_chars=30)  # saved cut, then redacted later
    for t in (trace, Trace.load(cut)):
        text = t.to_json(redact=True)
        assert "John Doe" not in text, text[:2000]
        jsonschema.validate(t.to_dict(redact=True), json_schema())
    from groundlens_core.trace.html import render_html

    assert "John Doe" not in render_html(Trace.load(cut), redact=True)


def test_save_never_truncates_an_existing_file(tmp_path):
    path = tmp_path / "t.json"
    rec = Recorder("test")
    rec.record(CallRecord("k", "n", kind="tool", response="fine"))
    rec.get_trace().save(path)
    good = path.read_text(encoding="utf-8")
    broken = rec.get_trace()
    broken.metadata["bad"] = object()  # not JSON-serialisable: to_json fails before anything is written
    with pytest.raises(TypeError):
        broken.save(path)
    assert path.read_text(encoding="utf-8") == good
    surrogate = Trace.from_dict({**rec.get_trace().to_dict(), "name": "cut emoji \ud83d"})
    surrogate.save(path)  # written escaped, not refused
    assert "cut emoji" in path.read_text(encoding="utf-8")


def test_get_traces_snapshots_do_not_share_metadata():
    rec = Recorder("test")
    rec.record(CallRecord("k", "n", kind="tool", response="x"))
    snap = rec.get_traces()[0]
    rec.annotate_trace("k", {"later": True})
    assert "later" not in snap.metadata and rec.get_traces()[0].metadata == {"later": True}


def test_start_trace_never_rewrites_an_open_trace():
    rec = Recorder("test")
    assert rec.start_trace("k", name="first", metadata={"user": "a"}) is True
    assert rec.start_trace("k", name="second", metadata={"user": "b", "extra": 1}) is False
    trace = rec.get_trace("k")
    assert trace.name == "first" and trace.metadata == {"user": "a"}


def test_to_html_survives_a_reload_of_the_model():
    """The HTML report reaches the model through a hook the trace package sets once; reloading the
    model module (a notebook's autoreload) keeps it. In a child process: a reload replaces the
    model's classes for everything imported after it."""
    import subprocess
    import sys

    code = (
        "import importlib, groundlens_core.trace.model as m; r = importlib.reload(m); "
        "t = r.Trace(id='t', name='reloaded', framework='test', started_at='2026-01-01T00:00:00Z'); "
        "print('<html' in t.to_html().lower())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
