"""Streaming ``evaluate``: the Python API, file formats, the defects found by probing, and resume after SIGKILL."""

from __future__ import annotations

import csv
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_io import interrupt, one_line_error, write_csv

from groundlens_core import evaluate_batch
from groundlens_core.batch.columns import result_columns
from groundlens_core.cli import main
from groundlens_core.scoring.results import ScoreError
from groundlens_core.stream import evaluate_stream

DATA = Path(__file__).resolve().parents[1] / "groundlens_core" / "data" / "halueval_qa.csv"
CTX = "The Oberoi Group is a hotel company with its head office in Delhi."


def _rows(n: int, start: int = 0) -> list[dict]:
    with open(DATA, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))[start : start + n]
    return [
        {"id": r["id"], "question": r["question"], "context": r["context"] if i % 4 else "", "response": r["response"]}
        for i, r in enumerate(rows)
    ]


@pytest.fixture
def no_scoring(monkeypatch):
    """Fail the test if any row gets scored: the checks under test must come first."""
    import groundlens_core.batch.chunks as chunks

    def boom(*a, **k):
        raise AssertionError("scoring started before the check")

    monkeypatch.setattr(chunks, "score_chunk", boom)


# ---------------------------------------------------------------- the Python API


def test_evaluate_stream_is_lazy_ordered_and_equal_to_evaluate_batch():
    items = [(r["question"], r["response"], r["context"]) for r in _rows(23)]
    items[5] = ("", "no question", None)
    items[17] = {"question": "Q?", "response": 42}
    pulled = []

    def source():
        for k, it in enumerate(items):
            pulled.append(k)
            yield it

    stream = evaluate_stream(source(), batch_size=4)
    first = next(stream)
    assert len(pulled) <= 4  # only one chunk was read to give the first result
    got = [first, *stream]
    want = evaluate_batch(items)
    assert [g.to_json() for g in got] == [w.to_json() for w in want]
    errors = [g for g in got if isinstance(g, ScoreError)]
    assert [e.index for e in errors] == [5, 17]  # positions in the whole stream, not in a chunk
    assert "question is blank" in errors[0].error and "response must be text" in errors[1].error
    with pytest.raises(Exception, match="question is blank"):
        list(evaluate_stream(iter(items), batch_size=4, errors="raise"))
    with pytest.raises(ValueError, match="batch_size"):
        next(evaluate_stream(items, batch_size=0))


# ---------------------------------------------------------------- formats


def test_csv_gz_jsonl_gz_and_parquet_give_the_same_scores(tmp_path):
    rows = _rows(12)
    src = write_csv(tmp_path / "in.csv", rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "ref.csv")]) == 0
    ref = (tmp_path / "ref.csv").read_bytes()

    with gzip.open(tmp_path / "in.csv.gz", "wb") as fh:
        fh.write(src.read_bytes())
    assert main(["evaluate", str(tmp_path / "in.csv.gz"), "-o", str(tmp_path / "gz.csv")]) == 0
    assert (tmp_path / "gz.csv").read_bytes() == ref

    # CSV -> Parquet -> CSV is the same file: text columns stay text, our columns are typed
    assert main(["evaluate", str(src), "-o", str(tmp_path / "out.parquet"), "--batch-size", "5"]) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names[:4] == ["id", "question", "context", "response"]
    assert str(table.schema.field("groundlens_value").type) == "double"
    assert str(table.schema.field("groundlens_flagged").type) == "bool"
    assert main(["evaluate", str(tmp_path / "out.parquet"), "-o", str(tmp_path / "back.csv")]) == 0
    # scoring the scored file again: our earlier columns are kept as input_<name>, the new ones are the same
    import csv as _csv
    import io

    ref_rows = list(_csv.DictReader(io.StringIO(ref.decode("utf-8"))))
    back_rows = list(_csv.DictReader(io.StringIO((tmp_path / "back.csv").read_text(encoding="utf-8"))))
    assert [{k: r[k] for k in ref_rows[0]} for r in back_rows] == ref_rows
    assert all(r["input_groundlens_score"] == r["groundlens_score"] for r in back_rows)

    # --sort into Parquet: the same order as --sort into CSV (a second pass over the Arrow parts)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "sorted.csv"), "--sort"]) == 0
    assert main(["evaluate", str(src), "-o", str(tmp_path / "sorted.parquet"), "--sort", "--batch-size", "5"]) == 0
    sorted_ids = [r["id"] for r in csv.DictReader(open(tmp_path / "sorted.csv", encoding="utf-8", newline=""))]
    assert pq.read_table(tmp_path / "sorted.parquet").column("id").to_pylist() == sorted_ids != [r["id"] for r in rows]

    jl = tmp_path / "in.jsonl.gz"
    with gzip.open(jl, "wt", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps({**r, "meta": {"k": 1}}) + "\n")
    assert main(["evaluate", str(jl), "-o", str(tmp_path / "out.jsonl"), "--sort"]) == 0
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    by_id = {r["id"]: r for r in csv.DictReader(open(tmp_path / "ref.csv", encoding="utf-8", newline=""))}
    assert len(out) == 12 and out[0]["meta"] == {"k": 1}
    for r in out:
        assert repr(r["groundlens_value"]) == by_id[r["id"]]["groundlens_value"]
    # JSONL values that are not text become JSON text in Parquet
    assert main(["evaluate", str(jl), "-o", str(tmp_path / "j.parquet")]) == 0
    assert pq.read_table(tmp_path / "j.parquet").column("meta")[0].as_py() == '{"k": 1}'


# ---------------------------------------------------------------- defects found by probing


def test_csv_field_over_the_csv_module_limit_is_scored_or_a_row_error_like_jsonl(tmp_path):
    long_ok = ("The Oberoi Group has its head office in Delhi. " * 3000)[:140_000]  # > 131,072
    too_long = "x " * 110_000  # 220,000 characters: over the 200,000-character limit
    rows = [
        {"question": "Where is the head office?", "response": long_ok, "context": CTX},
        {"question": "Where is the head office?", "response": too_long, "context": CTX},
        {"question": "Where is the head office?", "response": "In Delhi.", "context": CTX},
    ]
    src = write_csv(tmp_path / "in.csv", rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 0
    got = list(csv.DictReader(open(tmp_path / "o.csv", encoding="utf-8", newline="")))
    assert got[0]["groundlens_method"] == "sgi" and len(got[0]["response"]) == 140_000
    assert got[1]["groundlens_method"] == "error" and "the limit is 200,000" in got[1]["groundlens_error"]
    assert got[2]["groundlens_method"] == "sgi"
    src_j = tmp_path / "in.jsonl"
    src_j.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["evaluate", str(src_j), "-o", str(tmp_path / "o.jsonl")]) == 0
    back = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["groundlens_method"] for r in back] == [r["groundlens_method"] for r in got]


def test_output_equal_to_input_is_refused_and_the_input_survives(tmp_path, capsys, no_scoring):
    src = write_csv(tmp_path / "in.csv", _rows(3))
    before = src.read_bytes()
    os.symlink(src, tmp_path / "link.csv")
    for target in (src, tmp_path / "link.csv", tmp_path / "sub" / ".." / "in.csv"):
        assert main(["evaluate", str(src), "-o", str(target)]) == 2
        assert "is the input file" in one_line_error(capsys)
    assert src.read_bytes() == before


def test_unwritable_output_and_html_fail_before_any_scoring(tmp_path, capsys, no_scoring):
    src = write_csv(tmp_path / "in.csv", _rows(3))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["evaluate", str(src), "-o", str(blocker / "out.csv")]) == 2
    err = one_line_error(capsys)
    assert "cannot write the output" in err and str(blocker / "out.csv") in err
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(blocker / "r.html")]) == 2
    err = one_line_error(capsys)
    assert "cannot write the HTML report" in err and str(blocker / "r.html") in err and ".tmp" not in err
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.txt")]) == 2
    assert "unsupported output type" in one_line_error(capsys)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(tmp_path / "r.csv")]) == 2
    assert "would overwrite a data file" in one_line_error(capsys)
    assert not (tmp_path / "o.csv").exists()


def test_header_problems_and_a_directory_as_input(tmp_path, capsys):
    dup = tmp_path / "dup.csv"
    dup.write_text("question,response,response\nQ?,first,second\n", encoding="utf-8")
    assert main(["evaluate", str(dup), "-o", str(tmp_path / "o.csv")]) == 2
    assert "duplicate column name(s) 'response'" in one_line_error(capsys)

    ragged = tmp_path / "ragged.csv"
    ragged.write_text(
        "id,question,response\n1,Where is the head office?,In Delhi.\n"
        "2,Where is it?,In Delhi, India.,extra\n3,What is the capital of France?\n",
        encoding="utf-8",
    )
    assert main(["evaluate", str(ragged), "-o", str(tmp_path / "r.csv")]) == 0
    got = list(csv.DictReader(open(tmp_path / "r.csv", encoding="utf-8", newline="")))
    assert [g["id"] for g in got] == ["1", "2", "3"]
    assert got[0]["groundlens_method"] == "dgi"
    assert got[1]["groundlens_method"] == "error"
    assert (
        "row 2 has 5 fields but the header has 3" in got[1]["groundlens_error"]
        and "' India.'" in got[1]["groundlens_error"]
    )
    assert got[2]["groundlens_method"] == "error" and "response is missing" in got[2]["groundlens_error"]

    capsys.readouterr()
    (tmp_path / "folder.csv").mkdir()
    assert main(["evaluate", str(tmp_path / "folder.csv"), "-o", str(tmp_path / "o.csv")]) == 2
    assert "is a directory" in one_line_error(capsys)
    assert main(["evaluate", str(ragged), "-o", str(tmp_path / "folder.csv")]) == 2
    assert "is a directory" in one_line_error(capsys)


def test_big_batch_html_shows_the_riskiest_rows_and_a_summary_of_all(tmp_path, capsys):
    rows = _rows(10)
    rows[3]["response"] = ""  # a blank response: an error row (a blank question with a context is scored: support)
    src = write_csv(tmp_path / "in.csv", rows)
    html = tmp_path / "r.html"
    assert (
        main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(html), "--html-rows", "3", "--sort"])
        == 0
    )
    assert "the riskiest 3 of 10 rows" in capsys.readouterr().err
    page = html.read_text(encoding="utf-8")
    assert "All 10 rows of the batch" in page and "riskiest 3 of 10 rows" in page
    assert page.count('"rank":') == 3  # the shown rows, in the page's data
    assert f'"id": "{rows[3]["id"]}"' in page or f'"id":"{rows[3]["id"]}"' in page  # the error row, by its id column
    out = list(csv.DictReader(open(tmp_path / "o.csv", encoding="utf-8", newline="")))
    assert out[0]["groundlens_triage"] == "error"


def test_threads_option_and_environment(tmp_path, capsys, monkeypatch):
    import torch

    src = write_csv(tmp_path / "in.csv", _rows(12))
    before = torch.get_num_threads()
    try:
        assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
        # more scoring threads are encode lanes of one torch thread each: the same bytes. The texts
        # are encoded afresh (not from the cache the first run filled), with the lanes in effect.
        from groundlens_core.embedding.lanes import current_lanes
        from groundlens_core.scoring import get_default_embedder

        emb = get_default_embedder()
        encode, lanes_seen = emb.inner.encode, []
        monkeypatch.setattr(emb.inner, "encode", lambda texts: lanes_seen.append(current_lanes()) or encode(texts))
        spans = emb.inner.encode_spans
        monkeypatch.setattr(
            emb.inner, "encode_spans", lambda texts, sp: lanes_seen.append(current_lanes()) or spans(texts, sp)
        )
        emb.clear()
        assert main(["evaluate", str(src), "-o", str(tmp_path / "o3.csv"), "--threads", "3"]) == 0
        from groundlens_core.embedding.lanes import usable_cpus

        assert lanes_seen and set(lanes_seen) == {min(3, usable_cpus())}, lanes_seen  # capped at the CPUs
        assert torch.get_num_threads() == 1
        assert (tmp_path / "o3.csv").read_bytes() == (tmp_path / "o.csv").read_bytes()
        capsys.readouterr()
        monkeypatch.setenv("GROUNDLENS_THREADS", "zero")  # a bad value: a warning, then one thread
        assert main(["evaluate", str(src), "-o", str(tmp_path / "o2.csv")]) == 0
        assert (tmp_path / "o2.csv").read_bytes() == (tmp_path / "o.csv").read_bytes()
    finally:
        torch.set_num_threads(before)


def test_threads_hold_for_the_html_pass_and_the_python_api(tmp_path, monkeypatch):
    """``EvaluateJob(threads=N)`` scores every chunk, and the rows the HTML pass scores again (here
    none were kept from the run), with N lanes of one torch thread each; a Python caller's own torch
    thread count is back afterwards."""
    import torch

    import groundlens_core.batch.chunks as chunks
    import groundlens_core.batch.evaluate_job as evaluate_job
    import groundlens_core.stream as stream
    from groundlens_core.embedding.lanes import current_lanes, usable_cpus

    if usable_cpus() < 2:
        pytest.skip("one CPU: scoring threads are capped at 1, nothing to tell apart")
    src = write_csv(tmp_path / "in.csv", _rows(6))
    score_chunk, seen = chunks.score_chunk, []

    def spy(*args, **kwargs):
        seen.append((current_lanes(), torch.get_num_threads()))
        return score_chunk(*args, **kwargs)

    monkeypatch.setattr(chunks, "score_chunk", spy)
    monkeypatch.setattr(evaluate_job, "riskiest_keeper", lambda job: None)  # the report scores its rows
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        job = stream.EvaluateJob(
            input=src, output=tmp_path / "o.csv", html=tmp_path / "r.html", threads=2, progress=False
        )
        stream.run_evaluate(job, log=lambda msg: None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(seen) == 2 and set(seen) == {(2, 1)}, seen  # the run's chunk and the HTML pass


# ---------------------------------------------------------------- nothing lost


#: ``groundlens evaluate`` that cannot finish: scoring the chunk from row ``HOLD`` on waits (bounded)
#: instead, so the test's SIGKILL lands mid-run however the machine schedules the two processes;
#: a poller that got no CPU for a while used to find the run already done
_HELD_CLI = """
import sys, time
import groundlens_core.batch.chunks as chunks
from groundlens_core.cli import main
hold, score = int(sys.argv[1]), chunks.score_chunk
def held(items, *a, start=0, **k):
    if start >= hold:
        time.sleep(600)
    return score(items, *a, start=start, **k)
chunks.score_chunk = held
sys.exit(main(sys.argv[2:]))
"""


def _cli(*args: str, hold: int) -> list[str]:
    return [sys.executable, "-c", _HELD_CLI, str(hold), *args]


def _kill_mid_run(cmd: list[str], checkpoint: Path, total: int, env: dict) -> None:
    """Start ``cmd``, wait until its checkpoint shows some but not all rows written, SIGKILL it."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 600
        done = 0
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-500:]}"
            try:
                done = json.loads(checkpoint.read_text())["rows_done"]
            except (OSError, ValueError, KeyError):
                done = 0
            if done >= 16:
                break
            time.sleep(0.02)
        assert 16 <= done < total
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()  # never left running, whatever failed above
        proc.wait(timeout=60)
        proc.stderr.close()


@pytest.mark.parametrize("fmt,extra", [("csv", ["--sort"]), ("parquet", [])])
def test_sigkill_then_resume_gives_the_bytes_of_an_uninterrupted_run(tmp_path, capsys, fmt, extra):
    rows = _rows(160, start=200)
    src = write_csv(tmp_path / "in.csv", rows)
    ref = tmp_path / f"ref.{fmt}"
    assert main(["evaluate", str(src), "-o", str(ref), "--batch-size", "8", *extra]) == 0

    out = tmp_path / f"out.{fmt}"
    checkpoint = tmp_path / f".out.{fmt}.groundlens-partial.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = _cli("evaluate", str(src), "-o", str(out), "--batch-size", "8", *extra, hold=120)  # of 160 rows
    _kill_mid_run(cmd, checkpoint, len(rows), env)
    assert not out.exists()  # the target appears only when complete
    assert checkpoint.exists() and (tmp_path / f".out.{fmt}.groundlens-partial").exists()

    capsys.readouterr()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "8", *extra]) == 2
    assert "add --resume" in one_line_error(capsys)
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "16", "--resume", *extra]) == 2
    assert "batch_size changed" in one_line_error(capsys)

    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "8", "--resume", *extra]) == 0
    assert "resuming after row" in capsys.readouterr().err
    assert out.read_bytes() == ref.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.csv", ref.name, out.name])


def test_resume_without_a_partial_run_starts_from_the_first_row(tmp_path, capsys):
    src = write_csv(tmp_path / "in.csv", _rows(3))
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--resume"]) == 0
    assert "nothing to resume" in capsys.readouterr().err
    got = list(csv.DictReader(open(tmp_path / "o.csv", encoding="utf-8", newline="")))
    want = [result_columns(r) for r in evaluate_batch(_rows(3))]
    assert [g["groundlens_triage"] for g in got] == [w["groundlens_triage"] for w in want]


# ---------------------------------------------------------------- found in review (r12)


def test_an_engine_that_cannot_start_leaves_nothing_to_resume(tmp_path, capsys, monkeypatch):
    """Ray missing or its --address unreachable failed after the partial and checkpoint were made,
    so the next run (any engine) was refused with "add --resume" for a run that never started."""
    import groundlens_core.batch.evaluate_job as evaluate_job
    from groundlens_core.errors import GroundlensInputError

    src = write_csv(tmp_path / "in.csv", _rows(3))
    out = tmp_path / "out.csv"

    def no_cluster(*a, **k):
        raise GroundlensInputError("no Ray cluster at 127.0.0.1:1")

    with monkeypatch.context() as m:
        m.setattr(evaluate_job, "_make_scorer", no_cluster)
        assert main(["evaluate", str(src), "-o", str(out)]) == 2
    assert "no Ray cluster" in one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert main(["evaluate", str(src), "-o", str(out)]) == 0
    assert out.is_file()


@pytest.mark.parametrize("extra", [[], ["--sort"]])
def test_resume_after_a_kill_between_the_final_rename_and_the_clean_up(tmp_path, capsys, monkeypatch, extra):
    """Killed after the complete CSV was renamed into place but before the checkpoint was removed:
    --resume failed on the missing partial ("No such file or directory") and the run was stuck."""
    import groundlens_core.batch.partial_output as partial_output

    rows = _rows(12)
    src = write_csv(tmp_path / "in.csv", rows)
    ref = tmp_path / "ref.csv"
    assert main(["evaluate", str(src), "-o", str(ref), "--batch-size", "5", *extra]) == 0
    out = tmp_path / "out.csv"

    def killed(self):
        raise SystemExit(137)  # what is on disk is what a SIGKILL at this point leaves

    with monkeypatch.context() as m:
        m.setattr(partial_output.PartialPaths, "remove", killed)
        with pytest.raises(SystemExit):
            main(["evaluate", str(src), "-o", str(out), "--batch-size", "5"])
    assert out.is_file() and (tmp_path / ".out.csv.groundlens-partial.json").is_file()
    capsys.readouterr()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "5", "--resume", *extra]) == 0
    assert out.read_bytes() == ref.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv", "ref.csv"]


def test_resume_whose_partial_is_gone_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    import groundlens_core.batch.partial_output as partial_output

    src = write_csv(tmp_path / "in.csv", _rows(6))
    out = tmp_path / "out.csv"

    def killed(self, rows, first_row, keys=None):
        raise SystemExit(137)

    with monkeypatch.context() as m:
        m.setattr(partial_output.Sink, "write", killed)
        with pytest.raises(SystemExit):
            main(["evaluate", str(src), "-o", str(out), "--batch-size", "3"])
    (tmp_path / ".out.csv.groundlens-partial").unlink()
    capsys.readouterr()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3", "--resume"]) == 2
    assert "is gone" in one_line_error(capsys)
    assert not out.exists()


def test_nested_jsonl_values_are_json_text_in_a_csv_output(tmp_path, capsys):
    """A nested JSONL value went into the CSV as a Python repr ({'k': [1, 2]}), which no JSON reader
    takes; the Parquet output already wrote JSON text."""
    meta = {"k": [1, 2], "s": "é"}
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"question": "What is 2+2?", "response": "It is 4.", "meta": meta, "tags": ["a", "b"]}) + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.csv"
    assert main(["evaluate", str(src), "-o", str(out)]) == 0
    (row,) = list(csv.DictReader(open(out, encoding="utf-8", newline="")))
    assert json.loads(row["meta"]) == meta and json.loads(row["tags"]) == ["a", "b"]
    assert row["groundlens_flagged"] in ("True", "False")  # our own columns are written as before


def test_engine_ray_address_with_no_cluster_is_aone_line_error(tmp_path, capsys):
    """ray.init(address=...) with nothing listening retried for minutes (printing warnings about the
    node's IP, not the address given) and left a checkpoint; now one line, at once, nothing left."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    src = write_csv(tmp_path / "in.csv", _rows(2))
    t0 = time.monotonic()
    assert (
        main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--engine", "ray", "--address", f"127.0.0.1:{port}"])
        == 2
    )
    assert time.monotonic() - t0 < 120
    err = one_line_error(capsys)
    assert f"no Ray cluster answers at --address 127.0.0.1:{port}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_jsonl_output_is_strict_json_when_a_parquet_float_is_nan(tmp_path, capsys):
    """A NaN in a Parquet float column was written to JSONL as the bare token NaN, which strict JSON
    readers (jq, JavaScript, Go) reject; JSON has no NaN, so it is null."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "question": ["What is 2+2?", "Who wrote Hamlet?"],
                "response": ["It is 4.", "Shakespeare."],
                "latency": [float("nan"), 1.5],
                "hist": [[float("inf"), 2.0], [1.0]],
            }
        ),
        src,
    )
    out = tmp_path / "out.jsonl"
    assert main(["evaluate", str(src), "-o", str(out)]) == 0

    def strict(token):
        raise ValueError(f"not JSON: {token}")

    rows = [json.loads(line, parse_constant=strict) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["latency"] for r in rows] == [None, 1.5] and rows[0]["hist"] == [None, 2.0]
    assert all(r["groundlens_method"] == "dgi" for r in rows)


# ---------------------------------------------------------------- a resume proves what it continues


def _interrupt(monkeypatch, src: Path, out: Path, *, batch: int = 3, chunks: int = 3) -> None:
    """Run ``evaluate`` and stop it dead (as a SIGKILL would) after ``chunks`` checkpointed chunks."""
    interrupt(monkeypatch, ["evaluate", str(src), "-o", str(out), "--batch-size", str(batch)], chunks=chunks)


def _edit_checkpoint(path: Path, change) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(change(data)))


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


def _flip_byte(path: Path, at: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 0x20]))


#: damage done to an interrupted run's files (the checkpoint ``c``, partial ``p``, keys ``k``), and a
#: word the one-line refusal must hold (the name of the file it blames)
DAMAGE = {
    "partial truncated": (lambda c, p, k: _truncate(p, 200), "groundlens-partial "),
    "partial byte changed": (lambda c, p, k: _flip_byte(p, p.stat().st_size // 2), "groundlens-partial "),
    "rows_done +3": (lambda c, p, k: _edit_checkpoint(c, lambda d: {**d, "rows_done": d["rows_done"] + 3}), ".keys"),
    "rows_done -3": (lambda c, p, k: _edit_checkpoint(c, lambda d: {**d, "rows_done": d["rows_done"] - 3}), ".keys"),
    "bytes +7": (lambda c, p, k: _edit_checkpoint(c, lambda d: {**d, "bytes": d["bytes"] + 7}), "groundlens-partial "),
    "bytes -7": (lambda c, p, k: _edit_checkpoint(c, lambda d: {**d, "bytes": d["bytes"] - 7}), "groundlens-partial "),
    "checkpoint a JSON list": (lambda c, p, k: c.write_text("[1, 2]"), "a JSON list"),
    "checkpoint without signature": (
        lambda c, p, k: _edit_checkpoint(c, lambda d: {x: v for x, v in d.items() if x != "signature"}),
        "'signature'",
    ),
    "checkpoint signature a string": (
        lambda c, p, k: _edit_checkpoint(c, lambda d: {**d, "signature": "x"}),
        "signature",
    ),
    "checkpoint cut short": (lambda c, p, k: _truncate(c, 40), "not valid JSON"),
    "checkpoint rows true": (
        lambda c, p, k: _edit_checkpoint(c, lambda d: {**d, "signature": {**d["signature"], "rows": True}}),
        "malformed 'rows' in its signature (True)",
    ),
    "keys truncated": (lambda c, p, k: _truncate(k, k.stat().st_size - 5), ".keys"),
    "keys missing": (lambda c, p, k: k.unlink(), ".keys"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_resume_is_refused_in_one_line_before_scoring_and_a_fresh_run_is_right(
    tmp_path, capsys, monkeypatch, damage
):
    """The checkpoint was trusted as it stood: a cut partial gave 'scored 12/12' over NUL bytes,
    rows_done +-N lost or repeated rows, a JSON list or a missing key was a traceback, and a cut
    keys file failed only after the whole run."""
    import groundlens_core.batch.chunks as chunks

    src = write_csv(tmp_path / "in.csv", _rows(12))
    ref = tmp_path / "ref.csv"
    assert main(["evaluate", str(src), "-o", str(ref), "--batch-size", "3"]) == 0
    out = tmp_path / "out.csv"
    _interrupt(monkeypatch, src, out)
    partial = tmp_path / ".out.csv.groundlens-partial"
    keys, checkpoint = Path(f"{partial}.keys"), Path(f"{partial}.json")
    damage_it, blamed = DAMAGE[damage]
    damage_it(checkpoint, partial, keys)
    capsys.readouterr()

    def boom(*a, **k):
        raise AssertionError("scoring started before the check")

    with monkeypatch.context() as m:
        m.setattr(chunks, "score_chunk", boom)
        assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3", "--resume"]) == 2
    err = one_line_error(capsys)
    assert err.startswith("groundlens: error: cannot resume: ") and blamed in err, err
    assert "without --resume to start over" in err
    assert not out.exists()
    # what the message says works: a run without --resume starts over and writes the right bytes
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3"]) == 0
    assert out.read_bytes() == ref.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv", "ref.csv"]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_undamaged_resume_still_gives_the_bytes_of_an_uninterrupted_run(tmp_path, capsys, monkeypatch, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    src = write_csv(tmp_path / "in.csv", _rows(12))
    ref = tmp_path / f"ref.{fmt}"
    assert main(["evaluate", str(src), "-o", str(ref), "--batch-size", "3"]) == 0
    out = tmp_path / f"out.{fmt}"
    _interrupt(monkeypatch, src, out)
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3", "--resume"]) == 0
    assert "resuming after row 9 of 12" in capsys.readouterr().err
    assert out.read_bytes() == ref.read_bytes()


def test_a_damaged_parquet_part_is_refused(tmp_path, capsys, monkeypatch):
    pytest.importorskip("pyarrow")
    src = write_csv(tmp_path / "in.csv", _rows(12))
    out = tmp_path / "out.parquet"
    _interrupt(monkeypatch, src, out)
    part = tmp_path / ".out.parquet.groundlens-partial" / "part-0000001.arrow"
    _flip_byte(part, part.stat().st_size // 2)
    capsys.readouterr()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3", "--resume"]) == 2
    assert "does not match its checkpoint" in one_line_error(capsys)


def test_an_input_edited_with_the_same_size_and_mtime_is_not_resumed(tmp_path, capsys, monkeypatch):
    """Size and modification time were the input's identity: an edit keeping both resumed silently,
    mixing scores of two different files in one output."""
    rows = _rows(12)
    src = write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / "out.csv"
    _interrupt(monkeypatch, src, out)
    st = src.stat()
    first = rows[0]["response"].encode("utf-8")
    src.write_bytes(src.read_bytes().replace(first, first[::-1], 1))  # same length, other text
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.stat().st_size == st.st_size and src.stat().st_mtime_ns == st.st_mtime_ns
    capsys.readouterr()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3", "--resume"]) == 2
    assert "input_sha256 changed" in one_line_error(capsys)


# ---------------------------------------------------------------- one writer per output


def test_a_second_run_on_the_same_output_is_told_which_process_holds_it(tmp_path, capsys):
    rows = _rows(40)
    src = write_csv(tmp_path / "in.csv", rows)
    ref = tmp_path / "ref.csv"
    assert main(["evaluate", str(src), "-o", str(ref), "--batch-size", "8"]) == 0
    out = tmp_path / "out.csv"
    checkpoint = tmp_path / ".out.csv.groundlens-partial.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        _cli("evaluate", str(src), "-o", str(out), "--batch-size", "8", hold=16),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:  # the holder waits inside its run
            try:
                if json.loads(checkpoint.read_text())["rows_done"] >= 16:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
        assert proc.poll() is None
        capsys.readouterr()
        for extra in ([], ["--resume"]):
            assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "8", *extra]) == 2
            err = one_line_error(capsys)
            assert f"pid {proc.pid}" in err and "interrupted" not in err, err
        assert not out.exists()  # the second run wrote nothing, and took nothing away
        assert json.loads(checkpoint.read_text())["rows_done"] >= 16
    finally:
        proc.kill()
        proc.wait(timeout=60)
    # the lock of a killed run is stale: it never blocks, and the run it protected resumes
    assert (tmp_path / ".out.csv.groundlens-lock").exists()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "8", "--resume"]) == 0
    assert out.read_bytes() == ref.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv", "ref.csv"]


def test_a_stray_checkpoint_never_blocks_a_later_run(tmp_path, capsys, monkeypatch):
    """A checkpoint without its partial (left by two runs that raced on one output) made every later
    run fail: 'an interrupted run left ... add --resume', then with --resume 'the partial is gone'."""
    src = write_csv(tmp_path / "in.csv", _rows(6))
    out = tmp_path / "out.csv"
    _interrupt(monkeypatch, src, out, chunks=1)
    (tmp_path / ".out.csv.groundlens-partial").unlink()
    capsys.readouterr()
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "3"]) == 0
    err = capsys.readouterr().err
    assert "cannot be resumed" in err and "add --resume" not in err, err
    assert len(list(csv.DictReader(open(out, encoding="utf-8", newline="")))) == 6


def test_evaluate_keeps_the_mode_of_the_file_it_replaces(tmp_path, capsys):
    """The final rename put a 0644 partial over a 0600 output, widening who may read the scores."""
    src = write_csv(tmp_path / "in.csv", _rows(3))
    for extra in ([], ["--sort"]):
        out = tmp_path / f"out{len(extra)}.csv"
        out.write_text("old\n")
        out.chmod(0o600)
        assert main(["evaluate", str(src), "-o", str(out), *extra]) == 0
        assert out.stat().st_mode & 0o777 == 0o600
        assert out.read_text().startswith("id,question")


def test_an_html_report_that_is_the_input_is_named_as_such(tmp_path, capsys, no_scoring):
    """The refusal said 'give it an .html name' to a report that had one (a link to the input)."""
    src = write_csv(tmp_path / "in.csv", _rows(3))
    link = tmp_path / "report.html"
    os.link(src, link)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(link)]) == 2
    err = one_line_error(capsys)
    assert "is the input file" in err and ".html name" not in err, err
    assert src.read_text(encoding="utf-8").startswith("id,question")


# ---------------------------------------------------------------- files planted beside the output


@pytest.mark.parametrize(
    "suffix, role",
    [
        (".groundlens-lock", "lock"),
        (".groundlens-partial", "partial output"),
        (".groundlens-partial.keys", "row keys"),
        (".groundlens-partial.json", "checkpoint"),
    ],
)
@pytest.mark.parametrize("points_at", ["another file", "the input"])
def test_a_link_planted_where_a_run_keeps_its_files_is_refused_and_never_followed(
    tmp_path, capsys, no_scoring, suffix, role, points_at
):
    """The lock was opened with O_CREAT and truncated through a link (the victim held the PID), the
    partial was written through one (the input truncated, the output left a link to the victim)."""
    src = write_csv(tmp_path / "in.csv", _rows(3))
    before = src.read_bytes()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "o.csv"
    link = tmp_path / f".o.csv{suffix}"
    link.symlink_to(src if points_at == "the input" else victim)
    assert main(["evaluate", str(src), "-o", str(out)]) == 2
    err = one_line_error(capsys)
    assert str(link) in err and "symbolic link" in err and role in err, err
    assert victim.read_text() == "precious\n" and src.read_bytes() == before
    assert link.is_symlink() and not out.exists() and not out.is_symlink()


def test_a_hard_link_left_where_the_partial_goes_never_changes_the_file_it_shares(tmp_path, capsys):
    """A fresh partial was opened with "wb" on whatever was there: a hard link to the input was
    truncated with it, and the run then reported the input as changed."""
    src = write_csv(tmp_path / "in.csv", _rows(3))
    before = src.read_bytes()
    partial = tmp_path / ".o.csv.groundlens-partial"
    os.link(src, partial)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 0
    assert src.read_bytes() == before
    assert len(list(csv.DictReader(open(tmp_path / "o.csv", encoding="utf-8")))) == 3
    assert not partial.exists()


def test_the_checkpoint_is_never_written_through_a_planted_temporary_link(tmp_path, capsys):
    """The checkpoint was written to ``<checkpoint>.tmp`` opened with "w", following a link there."""
    src = write_csv(tmp_path / "in.csv", _rows(3))
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    (tmp_path / ".o.csv.groundlens-partial.json.tmp").symlink_to(precious)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 0
    assert precious.read_text() == "precious\n"
    assert not (tmp_path / "o.csv").is_symlink()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".o.csv"))
    assert leftovers == [".o.csv.groundlens-partial.json.tmp"], leftovers  # the planted link, left alone
