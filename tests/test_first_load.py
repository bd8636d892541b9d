"""The worker's first load (torch's import, the model's load) while the agent's thread goes on: the
parts that held the GIL for long run without it, the worker is not niced while it loads, and an
exit that may not wait does not wait for the import. How long the agent's thread is kept waiting is
measured side by side in benchmarks/bench_first_record_gap.py, not here. Each case runs in a fresh
process, where torch is not imported yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from groundlens_core.trace.recorder import CallRecord, Recorder

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the loader and /proc are Linux's")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@linux
def test_torchs_libraries_are_loaded_before_its_import_and_the_import_finds_them():
    code = """
import json, sys
from groundlens_core.embedding import first_load
first_load.preload_torch_libraries()
maps = open("/proc/self/maps").read()
out = {"imported": "torch" in sys.modules, "cpu": "libtorch_cpu.so" in maps, "python": "libtorch_python.so" in maps}
torch = first_load.import_torch()
out["works"] = float(torch.ones(2).sum())
print(json.dumps(out))
"""
    out = json.loads(_run(code).stdout.splitlines()[-1])
    assert out == {"imported": False, "cpu": True, "python": True, "works": 2.0}


def test_a_first_import_runs_no_collection_and_freezes_what_it_made():
    code = """
import gc, json
from groundlens_core.embedding import first_load
passes = []
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
before = gc.get_freeze_count()
first_load.import_torch()
import_passes, frozen, enabled = len(passes), gc.get_freeze_count(), gc.isenabled()
gc.disable()  # a program that runs without the collector keeps it off
first_load.import_module("groundlens_core.scoring")
print(json.dumps({"before": before, "passes": import_passes, "frozen": frozen, "enabled": enabled,
                  "still_off": not gc.isenabled()}))
"""
    out = json.loads(_run(code).stdout.splitlines()[-1])
    assert out["before"] == 0 and out["passes"] == 0
    assert out["frozen"] > 10_000  # torch's modules, functions and classes: out of every later pass
    assert out["enabled"] and out["still_off"]


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="per-thread nice values are Linux's")
def test_the_worker_is_niced_only_after_its_first_batch():
    """Niced while it imports torch, a worker preempted while it holds the GIL kept the agent's
    thread waiting for as long as the OS left it preempted."""
    seen: list[int] = []

    class Priority:
        def on_step(self, trace, step):
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    rec = Recorder("test", listeners=[Priority()], worker_torch_threads=None)
    rec.record(CallRecord(trace_key="k", node="n", kind="tool", response="first"))
    assert rec.flush()
    rec.record(CallRecord(trace_key="k", node="n", kind="tool", response="second"))
    assert rec.flush()
    assert seen == [base, min(19, base + 10)]


def test_an_exit_that_may_not_wait_does_not_wait_for_torchs_import():
    """GROUNDLENS_EXIT_FLUSH_SECONDS=0 and the worker still importing torch (a torch backend): the exit records the
    queued step unscored itself and goes on; the import is still unfinished when the last exit hook
    runs, and the process ends cleanly."""
    code = """
import atexit, sys, time
from groundlens_core.embedding import first_load
seen = []
# registered first, so it runs last: after the recorders' exit hook
atexit.register(lambda: print("torch ready", first_load._ready("torch") is not None, "steps", seen, flush=True))
from groundlens_core.trace.recorder import CallRecord, Recorder
class Steps:
    def on_step(self, trace, step):
        seen.append(step.skip_reason or step.method)
rec = Recorder("x", listeners=[Steps()])
rec.record(CallRecord(trace_key="k", node="llm", kind="llm", question="When was it founded?",
                      response="It was founded in 1998.", context=["The company was founded in 1998."]))
deadline = time.monotonic() + 120
while "torch" not in sys.modules or first_load._ready("torch") is not None:  # the worker is inside the import
    assert time.monotonic() < deadline, "the worker never started importing torch"
    time.sleep(0.002)
"""
    done = _run(code, GROUNDLENS_EXIT_FLUSH_SECONDS="0", GROUNDLENS_BACKEND="packed-torch")
    assert "torch ready False steps ['pending']" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert "1 step(s) of x were scored" in done.stderr
    assert "Fatal" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-2000:]


def test_the_default_backend_scores_without_ever_importing_torch():
    """The default (ONNX Runtime) needs no torch: the worker neither imports it nor loads its
    libraries, so the agent's process is spared torch's import and its longest GIL pauses."""
    code = """
import json, sys
from groundlens_core.trace.recorder import CallRecord, Recorder
rec = Recorder("x")
rec.record(CallRecord(trace_key="k", node="llm", kind="llm", question="When was it founded?",
                      response="It was founded in 1998.", context=["The company was founded in 1998."]))
assert rec.flush(120)
step = rec.get_trace("k").steps[0]
maps = open("/proc/self/maps").read() if sys.platform.startswith("linux") else ""
print(json.dumps({"method": step.method, "backend": step.result.backend, "torch": "torch" in sys.modules,
                  "libtorch": "libtorch_cpu" in maps}))
"""
    env = {k: v for k, v in os.environ.items() if k != "GROUNDLENS_BACKEND"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out == {"method": "sgi", "backend": "onnx-fp32", "torch": False, "libtorch": False}


def test_the_first_load_decides_on_torch_without_importing_onnx_runtime():
    """The worker's first-load window (where an exit does not wait) imports nothing of ONNX
    Runtime: an interpreter finalizing while a thread is inside its native import can crash."""
    code = """
import json, sys
from groundlens_core.trace.recorder.worker import _torch_backend_expected
print(json.dumps({"torch": _torch_backend_expected(), "ort": "onnxruntime" in sys.modules}))
"""
    env = {k: v for k, v in os.environ.items() if k != "GROUNDLENS_BACKEND"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"torch": False, "ort": False}
    out = _run(code, GROUNDLENS_BACKEND="packed-torch")
    assert json.loads(out.stdout.splitlines()[-1]) == {"torch": True, "ort": False}
