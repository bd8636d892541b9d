"""Encode lanes: a thread's forward passes shared with helper threads, same results, never held up."""

from __future__ import annotations

import json
import os
import select
import signal
import threading

import numpy as np
import pytest

from groundlens_core.embedding import default_backend, get_embedder
from groundlens_core.embedding.lanes import current_lanes, encode_lanes, run_jobs, usable_cpus
from groundlens_core.embedding.packed import bf16_supported
from groundlens_core.errors import GroundlensInputError


def test_lanes_are_a_per_thread_setting():
    seen = {}
    with encode_lanes(3):
        t = threading.Thread(target=lambda: seen.setdefault("other", current_lanes()))
        t.start()
        t.join()
        seen["here"] = current_lanes()
    assert seen == {"other": 1, "here": 3} and current_lanes() == 1
    with pytest.raises(ValueError, match=">= 1"):
        with encode_lanes(0):
            pass


def test_jobs_come_back_in_order_and_helpers_take_some():
    ran_on: list[str] = []
    gate = threading.Barrier(2, timeout=120)

    def job(i: int):
        def run() -> int:
            ran_on.append(threading.current_thread().name)
            if i < 2:
                gate.wait()  # the first two jobs only finish together: two threads must be running them
            return i * i

        return run

    with encode_lanes(2):
        assert run_jobs([job(i) for i in range(12)]) == [i * i for i in range(12)]
    assert any(name.startswith("groundlens-lane") for name in ran_on)


@pytest.mark.parametrize("helper", ["starved", "failing"])
def test_a_starved_or_failing_helper_never_holds_the_caller_up(helper):
    """Two jobs: the one a helper takes is starved there (stuck until the test releases it) or fails;
    the one the caller takes waits until the helper holds the other. The caller must redo the
    helper's job itself and return every result while the starved helper is still stuck."""
    lane_took: list[int] = []
    lane_has_one, release = threading.Event(), threading.Event()
    runs = [0, 0]

    def job(i: int):
        def run() -> str:
            runs[i] += 1
            if threading.current_thread().name.startswith("groundlens-lane"):
                lane_took.append(i)
                lane_has_one.set()
                if helper == "failing":
                    raise RuntimeError("a helper's failure")
                release.wait(300)  # starved: bounded (beyond the caller's patience), released at the end
                return "late"
            assert lane_has_one.wait(120), "no helper took a job"
            return str(i)

        return run

    try:
        with encode_lanes(2):
            out = run_jobs([job(0), job(1)])
        assert out == ["0", "1"] and lane_took
        assert all(runs[i] == 2 for i in lane_took)  # once on the helper, once more on the caller
        assert not release.is_set()  # the caller returned while the starved helper was still stuck
    finally:
        release.set()


def test_lanes_give_the_bits_of_one_thread(tmp_path):
    """The packed backend's rows do not depend on the lane count (nor on who ran which pass)."""
    emb = get_embedder(backend="packed-torch").inner
    words = "refund policy invoice 30 days shipping $181,674,817 Paris 1844 the customer asked".split()
    rng = np.random.default_rng(5)
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(3, 120, size=90)]
    one = emb.encode(texts)
    with encode_lanes(2):
        two = emb.encode(texts)
    with encode_lanes(3):
        three = emb.encode(texts)
    assert np.array_equal(one, two) and np.array_equal(one, three)
    assert np.array_equal(emb.encode(texts[:1])[0], two[0])
    if bf16_supported():
        fast = get_embedder(backend="packed-bf16").inner
        ref = fast.encode(texts)
        with encode_lanes(2):
            assert np.array_equal(ref, fast.encode(texts))


def test_the_default_backend_is_the_same_on_every_cpu_and_the_setting_overrides_it(monkeypatch):
    monkeypatch.delenv("GROUNDLENS_BACKEND", raising=False)
    from groundlens_core.embedding.onnx_backend import onnx_available

    assert default_backend() == ("onnx-fp32" if onnx_available() else "packed-torch")
    monkeypatch.setenv("GROUNDLENS_BACKEND", "packed-torch")
    assert default_backend() == "packed-torch"


def test_without_native_bf16_the_default_is_fp32_and_bf16_says_what_to_use(monkeypatch):
    from groundlens_core.embedding import onnx_backend, packed, resolve_model_path

    monkeypatch.delenv("GROUNDLENS_BACKEND", raising=False)
    monkeypatch.setattr(packed, "bf16_supported", lambda: False)
    monkeypatch.setattr(onnx_backend, "onnx_available", lambda: False)
    assert default_backend() == "packed-torch"
    path, model_id = resolve_model_path(None)
    with pytest.raises(GroundlensInputError, match="GROUNDLENS_BACKEND=packed-torch"):
        packed.PackedMiniLMEmbedder(path, model_id, precision="bf16")


def test_recorder_lanes_never_exceed_the_cpus():
    from groundlens_core.trace.recorder import Recorder

    assert Recorder("x", worker_lanes=64).worker_lanes == usable_cpus()
    assert Recorder("x", worker_lanes=0).worker_lanes == 1
    assert Recorder("x").worker_lanes == min(int(os.environ.get("GROUNDLENS_WORKER_LANES", "2")), usable_cpus())


def _needs_two_threads(n: int, gate: threading.Barrier):
    """``n`` jobs; the first two only finish together, so two threads must run them at once."""

    def job(i: int):
        def run() -> int:
            if i < 2:
                gate.wait()
            return i

        return run

    return [job(i) for i in range(n)]


def test_a_forked_child_gets_helpers_of_its_own():
    """After a fork the parent's helper threads do not exist in the child: the child must start its
    own (else its lanes run alone and every encode leaves its jobs in an inbox nobody reads)."""
    from groundlens_core.embedding import lanes

    with encode_lanes(2):
        assert run_jobs(_needs_two_threads(4, threading.Barrier(2, timeout=120))) == [0, 1, 2, 3]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        code = 1
        try:
            with encode_lanes(2):
                for _ in range(3):
                    assert run_jobs(_needs_two_threads(4, threading.Barrier(2, timeout=120))) == [0, 1, 2, 3]
            code = 0
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    try:
        # bounded: a child that hangs (a lock some other thread held at the fork) is killed, not
        # waited for until the test's time-out and then left behind
        answered = select.select([read], [], [], 300)[0]
        assert answered, "the forked child did not answer within 300 s"
        assert os.read(read, 1) == b"\x00", "the child's lanes had no helper"
    finally:
        os.close(read)
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert lanes._helpers.threads and all(t.is_alive() for t in lanes._helpers.threads)  # the parent's are intact


class _Payload:
    pass


def _encode_watched(gate: threading.Barrier) -> list:
    """Runs 4 jobs on 2 lanes; weak references to what the jobs held and to what they returned."""
    import weakref

    captured, produced = _Payload(), []

    def job(i: int):
        def run() -> _Payload:
            assert captured is not None  # the job holds what it needs (as an encode's jobs hold its ids)
            if i < 2:
                gate.wait()
            out = _Payload()
            produced.append(weakref.ref(out))
            return out

        return run

    with encode_lanes(2):
        assert len(run_jobs([job(i) for i in range(4)])) == 4
    return [weakref.ref(captured), *produced]


def test_a_finished_encode_is_not_kept_alive_by_the_helpers():
    """A helper must not keep a returned encode's jobs or results (for a big encode, its rows and
    token ids) alive until the next encode."""
    import gc
    import time

    watch = _encode_watched(threading.Barrier(2, timeout=120))
    deadline = time.monotonic() + 120  # bounded: a helper may still be returning from its last job
    while any(r() is not None for r in watch) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert len(watch) == 5 and all(r() is None for r in watch), "a helper still holds a finished encode"


def test_a_failed_encode_stops_the_helpers():
    """When a job raises on the caller, the encode is over: helpers take none of its other jobs."""
    gate = threading.Barrier(2, timeout=120)
    caller_failed, wasted = threading.Event(), threading.Event()

    def job(i: int):
        def run() -> int:
            if i < 2:
                gate.wait()  # one of the first two runs on a helper, one on the caller
                if threading.current_thread() is threading.main_thread():
                    raise RuntimeError("the caller's job failed")
                caller_failed.wait(120)  # the helper goes on only once the caller has failed
            else:
                wasted.set()
            return i

        return run

    with encode_lanes(2), pytest.raises(RuntimeError, match="caller's job failed"):
        run_jobs([job(i) for i in range(12)])
    caller_failed.set()
    assert not wasted.wait(2.0), "a helper went on with the jobs of an encode that had failed"


def test_a_bad_setting_in_the_environment_does_not_break_the_import():
    """An empty or misspelt GROUNDLENS_WORKER_LANES (or pending bound) gives a warning and the default,
    not a ValueError from importing the recorder (and with it every plugin)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import groundlens_core.trace.recorder as r; from groundlens_core.trace.recorder import lifecycle; "
        "print(r.WORKER_LANES, r.MAX_PENDING_STEPS, r.MAX_PENDING_BYTES == 8 * 1024 * 1024, lifecycle.EXIT_FLUSH_SECONDS)"
    )
    env = dict(
        os.environ,
        GROUNDLENS_WORKER_LANES="",
        GROUNDLENS_MAX_PENDING_STEPS="lots",
        GROUNDLENS_MAX_PENDING_BYTES="",
        GROUNDLENS_EXIT_FLUSH_SECONDS="soon",
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "256", "True", "10.0"]
    assert "GROUNDLENS_MAX_PENDING_STEPS='lots' is not a whole number" in done.stderr
    assert "GROUNDLENS_EXIT_FLUSH_SECONDS='soon' is not a number of seconds" in done.stderr
    env.update(GROUNDLENS_WORKER_LANES="1", GROUNDLENS_EXIT_FLUSH_SECONDS="2.5")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[0] == "1" and done.stdout.split()[3] == "2.5"


def test_the_exit_waits_for_a_helper_still_inside_a_job(tmp_path):
    """A job the caller redid (its helper was starved) may still run on the helper when the program
    ends; a daemon thread coming back from torch's GIL-free code while the interpreter finalizes
    aborts the process (exit status 134). The exit waits for it: here the helper's job outlives the
    caller by a second and still completes, and the process exits cleanly."""
    import subprocess
    import sys

    marker = tmp_path / "helper-finished"
    code = f"""
import threading, time
from groundlens_core.embedding.lanes import encode_lanes, run_jobs
started = threading.Event()
def job():
    if threading.current_thread().name.startswith("groundlens-lane"):
        started.set()
        time.sleep(1.0)  # the helper's job, still running when the caller has returned
        open({str(marker)!r}, "w").close()
    else:
        assert started.wait(60)
    return 0
with encode_lanes(2):
    run_jobs([job, job])
assert started.is_set()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert marker.exists(), "the interpreter exited while a helper was inside a job"


def test_wait_idle_waits_for_the_helpers_job_and_then_hands_out_none(monkeypatch):
    from groundlens_core.embedding import lanes

    monkeypatch.setattr(lanes, "_helpers", lanes._Helpers())  # this test stops its helpers
    on_helper, release = threading.Event(), threading.Event()
    ran_on: list[str] = []

    def job() -> int:
        ran_on.append(threading.current_thread().name)
        if threading.current_thread().name.startswith("groundlens-lane"):
            on_helper.set()
            release.wait(300)  # bounded, beyond the caller's patience (2 x its wait for on_helper)
        else:
            assert on_helper.wait(120)
        return 0

    try:
        with encode_lanes(2):
            assert run_jobs([job, job]) == [0, 0]  # the caller redid the helper's job
        assert not lanes._helpers.wait_idle(0.2)  # the helper is still inside its job
    finally:
        release.set()
    assert lanes._helpers.wait_idle(120)
    ran_on.clear()
    with encode_lanes(2):
        assert run_jobs([job, job]) == [0, 0]
    assert not any(name.startswith("groundlens-lane") for name in ran_on)  # stopped: no new jobs


def test_an_exit_with_a_backlog_left_stops_the_worker_between_batches():
    """A program that ends with more backlog than the exit flush waits for: the worker stops after the
    batch in hand and the exit waits for that, so it is never inside torch while the interpreter
    finalizes (which aborted the process: 'terminate called without an active exception', 134)."""
    import subprocess
    import sys

    code = """
from groundlens_core.trace.recorder import lifecycle, worker
from groundlens_core.trace.recorder import CallRecord, Recorder
lifecycle.EXIT_FLUSH_SECONDS = 0.3  # the backlog below outlasts it on any machine
worker.BATCH_MAX = 4
rec = Recorder("x", quiet_seconds=0.0, worker_lanes=2)
rec.start_trace("w")
rec.record(CallRecord(trace_key="w", node="n", question="warm up", context=["the model"], response="loads"))
assert rec.flush()
rec.start_trace("k")
for i in range(24):
    rec.record(CallRecord(trace_key="k", node="n", question=f"question {i} " * 10,
                          context=[f"context {i} " * 80], response=f"answer {i} " * 30))
print("exiting with a backlog of", rec._backlog.pending, flush=True)
"""
    for _ in range(2):  # the abort was likely, not certain: two exits
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "exiting with a backlog of" in done.stdout and "terminate called" not in done.stderr


def _short_program(out, gate: str = "") -> str:
    """A program that records three steps and ends at once; its listener writes what the trace's end
    brought (``gate``: code run first, e.g. to hold the worker back)."""
    return f"""
import json
from groundlens_core.trace.recorder import lifecycle
from groundlens_core.trace.recorder import CallRecord, Recorder
from groundlens_core.trace.recorder.worker import Worker
{gate}

class Keep:
    def on_trace_end(self, trace):
        with open({str(out)!r}, "w") as fh:
            json.dump([s.skip_reason or s.triage for s in trace.steps], fh)

rec = Recorder("x", listeners=[Keep()])
rec.start_trace("k")
for i in range(3):
    rec.record(CallRecord(trace_key="k", node="n", question=f"what is {{i}}?", context=[f"{{i}} is a number"],
                          response=f"{{i}} is a number"))
rec.end_trace("k")
"""


def _run_program(code: str, **env: str):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "scoring failed" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-2000:]
    return done


def test_a_short_program_that_exits_at_once_still_gets_its_steps_scored(tmp_path):
    """The worker loads torch on its first batch; a program that records a few steps and ends at once
    exits while that import runs. Its steps must still be scored by the exit flush (they all became
    "scoring failed: can't register atexit after shutdown"), with nothing printed at teardown. The
    exit waits 10 s by default; a loaded CI machine can take longer to load torch on a niced thread,
    so the program is given 300 s here (what happens when the time runs out is the next test)."""
    out = tmp_path / "steps.json"
    _run_program(_short_program(out), GROUNDLENS_EXIT_FLUSH_SECONDS="300")
    steps = json.loads(out.read_text())
    assert len(steps) == 3 and all(s in ("trusted", "review", "flagged") for s in steps), steps  # scored


def test_steps_the_exit_flush_did_not_reach_are_recorded_pending_not_lost(tmp_path):
    """When the exit's wait runs out before the worker scored anything (held back here until then),
    the steps still reach the trace and its listeners, unscored, with one warning that says how many."""
    out = tmp_path / "steps.json"
    gate = "Worker._limit_torch_threads = lambda self: lifecycle.EXITING.wait(120)"
    done = _run_program(_short_program(out, gate), GROUNDLENS_EXIT_FLUSH_SECONDS="0")
    assert json.loads(out.read_text()) == ["pending"] * 3
    assert "exited before 3 step(s) of x were scored" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("files", "want"),
    [
        ({"cpu.max": "150000 100000\n"}, 2),  # --cpus=1.5: lanes may use 2 (rounded up)
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu.max": "max 100000\n"}, None),  # no quota
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage\n"}, None),
        ({}, None),  # no cgroup files at all
    ],
)
def test_a_containers_cpu_quota_caps_the_lanes(tmp_path, files, want):
    from groundlens_core.embedding.lanes import _cgroup_cpu_quota

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _cgroup_cpu_quota(str(tmp_path)) == want
