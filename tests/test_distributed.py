"""Ray Data on a local Ray cluster (2 CPUs, loopback, no dashboard) that this module starts and stops.

The claim under test: scoring on Ray workers gives the same bytes as scoring in one process.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from groundlens_core import evaluate_batch  # noqa: E402
from groundlens_core.batch.columns import OUT_COLUMNS, result_columns  # noqa: E402
from groundlens_core.cli import main  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "groundlens_core" / "data" / "halueval_qa.csv"


def _rows(n: int) -> list[dict]:
    with open(DATA, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    return [{"id": r["id"], "question": r["question"], "context": r["context"] if i % 3 else "", "response": r["response"]}
            for i, r in enumerate(rows)]


def _processes_of(session_dir: str) -> list[str]:
    """Command lines of live processes that belong to this Ray session."""
    name = os.path.basename(session_dir.rstrip("/"))
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if name in cmd:
            found.append(f"{pid}: {cmd[:120]}")
    return found


@pytest.fixture(scope="module")
def ray_cluster():
    from groundlens_core.distributed import init_local_ray

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    assert not ray.is_initialized()
    assert init_local_ray(num_cpus=2) is True
    session_dir = ray._private.worker._global_node.get_session_dir_path()
    assert _processes_of(session_dir), "could not see the cluster's processes"
    yield
    ray.shutdown()
    deadline = time.monotonic() + 120  # Ray's processes exit on their own time; slow on a loaded machine
    while _processes_of(session_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_of(session_dir), "Ray processes left behind"


def test_score_dataset_gives_the_bytes_of_single_process_scoring(ray_cluster):
    from groundlens_core.distributed import score_dataset

    rows = _rows(30)
    rows[4]["response"] = ""  # a bad row: an error, the others scored
    ds = ray.data.from_items(rows, override_num_blocks=4)
    # two scoring threads per worker (encode lanes; the CLI engine test below runs one): the same bits
    out = score_dataset(ds, batch_size=7, concurrency=2, threads=2).take_all()
    want = [result_columns(r) for r in evaluate_batch(rows)]
    got_by_id = {r["id"]: r for r in out}
    assert len(out) == len(rows)
    for row, w in zip(rows, want):
        g = got_by_id[row["id"]]
        assert {k: g[k] for k in ("question", "context", "response")} == {k: row[k] for k in ("question", "context", "response")}
        for c in OUT_COLUMNS:
            assert g[c] == w[c] and type(g[c]) is type(w[c]), (c, g[c], w[c])  # exact floats: the same bits
    assert got_by_id[rows[4]["id"]]["groundlens_error"] == "response is blank"
    with pytest.raises(ValueError, match="missing column"):
        score_dataset(ray.data.from_items([{"q": "x"}]))


def test_score_dataset_scores_every_row_with_the_drivers_backend(ray_cluster):
    """The backend is resolved on the driver and travels to the workers: asked for ``onnx-int8``
    (not this machine's default), every worker scores its bits, not its own default's (on a mixed
    cluster each worker would otherwise be free to pick its own)."""
    from groundlens_core import get_embedder
    from groundlens_core.distributed import score_dataset
    from groundlens_core.embedding import default_backend

    assert default_backend() != "onnx-int8"
    rows = _rows(9)
    out = score_dataset(ray.data.from_items(rows, override_num_blocks=3), batch_size=3, backend="onnx-int8")
    got = {r["id"]: r for r in out.take_all()}
    asked = [result_columns(r) for r in evaluate_batch(rows, embedder=get_embedder(backend="onnx-int8"))]
    default = [result_columns(r) for r in evaluate_batch(rows)]
    assert any(a["groundlens_value"] != d["groundlens_value"] for a, d in zip(asked, default))  # the two differ
    for row, want in zip(rows, asked):
        assert {c: got[row["id"]][c] for c in OUT_COLUMNS} == want


def test_an_unknown_backend_is_refused_on_the_driver(monkeypatch):
    """Before any worker starts, as one line (not a traceback from each Ray worker)."""
    from groundlens_core.distributed import score_dataset
    from groundlens_core.errors import GroundlensInputError

    with pytest.raises(GroundlensInputError, match="unknown embedding backend 'packed-fp8'"):
        score_dataset(None, backend="packed-fp8")
    monkeypatch.setenv("GROUNDLENS_BACKEND", "packd-torch")
    with pytest.raises(GroundlensInputError, match="unknown embedding backend 'packd-torch'"):
        score_dataset(None)


def test_cli_engine_ray_writes_the_same_file_as_the_local_engine(ray_cluster, tmp_path):
    rows = _rows(40)
    rows[7]["response"] = ""
    src = tmp_path / "in.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "ray.csv"), "--engine", "ray", "--workers", "2",
                 "--batch-size", "8", "--sort", "--html", str(tmp_path / "r.html")]) == 0
    assert main(["evaluate", str(src), "-o", str(tmp_path / "local_sorted.csv"), "--sort"]) == 0
    assert (tmp_path / "ray.csv").read_bytes() == (tmp_path / "local_sorted.csv").read_bytes()
    assert ray.is_initialized()  # the CLI used the running cluster and left it to its owner


def test_score_dataset_without_a_question_column_scores_against_the_context(ray_cluster):
    """evaluate, evaluate_batch and the CLI score (response, context) rows without a question (method
    support); score_dataset refused such a dataset ("no column(s) question")."""
    from groundlens_core.distributed import score_dataset

    rows = [{"id": r["id"], "response": r["response"], "context": r["context"] or "Delhi is in India."} for r in _rows(6)]
    out = score_dataset(ray.data.from_items(rows), batch_size=4, concurrency=1).take_all()
    want = {row["id"]: result_columns(r) for row, r in zip(rows, evaluate_batch(rows))}
    assert len(out) == len(rows)
    for g in out:
        assert {c: g[c] for c in OUT_COLUMNS} == want[g["id"]]
    assert {g["groundlens_method"] for g in out} == {"support"}
    assert all(g["groundlens_support"] is not None for g in out)
