"""The `groundlens` command, in-process (fast) and once as the installed console script."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from groundlens_core.cli import main

CTX = "The Oberoi family is an Indian family famous for hotels. The Oberoi Group is a hotel company with its head office in Delhi."
Q = "The Oberoi family is part of a hotel company that has a head office in what city?"


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    return path


def test_check_json(capsys):
    assert main(["check", "-q", "Where is the head office?", "-r", "In Delhi.", "-c", CTX, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["method"] == "sgi" and data["triage"] in ("trusted", "review", "flagged")


def test_check_text_without_context(capsys):
    assert main(["check", "-q", "What is the capital of France?", "-r", "Paris."]) == 0
    out = capsys.readouterr().out
    assert out.startswith("score ") and "(no context: weak signal)  |  DGI " in out and "not a verdict of truth" in out


def test_evaluate_csv_keeps_columns_appends_scores_and_sorts(tmp_path, capsys):
    rows = [
        {"id": "a", "question": Q, "response": "The Oberoi Group's head office is in Delhi, India.", "context": CTX, "extra": "x"},
        {"id": "b", "question": Q, "response": "Many hotel companies are headquartered in large cities around the world.", "context": CTX, "extra": "y"},
        {"id": "c", "question": "", "response": "no question", "context": "", "extra": "z"},
        {"id": "d", "question": "What is the capital of France?", "response": "Paris.", "context": "", "extra": "w"},
    ]
    src = _write_csv(tmp_path / "in.csv", rows, ["id", "question", "response", "context", "extra"])
    out = tmp_path / "out.csv"
    assert main(["evaluate", str(src), "--output", str(out), "--sort"]) == 0
    got = list(csv.DictReader(open(out, encoding="utf-8")))
    assert len(got) == 4
    assert list(got[0].keys())[:5] == ["id", "question", "response", "context", "extra"]
    assert {"groundlens_method", "groundlens_value", "groundlens_normalized", "groundlens_flagged", "groundlens_triage", "groundlens_error"} <= set(got[0])
    by_id = {r["id"]: r for r in got}
    assert by_id["c"]["groundlens_method"] == "error" and "question is blank" in by_id["c"]["groundlens_error"]
    assert by_id["d"]["groundlens_method"] == "dgi"  # empty context cell -> DGI
    assert by_id["a"]["groundlens_method"] == by_id["b"]["groundlens_method"] == "sgi"
    # riskiest first: the error, then ascending ranking value within a band
    assert got[0]["id"] == "c"
    risk = {"error": 0, "flagged": 1, "review": 2, "trusted": 3}
    keys = [(risk[r["groundlens_triage"]], float(r["groundlens_score"] or 2)) for r in got]
    assert keys == sorted(keys)
    assert float(by_id["a"]["groundlens_value"]) > float(by_id["b"]["groundlens_value"])


def test_evaluate_jsonl(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"question": "Where is the head office?", "response": "Delhi.", "context": CTX, "meta": {"k": 1}},
        {"question": "What is the capital of France?", "response": "Paris."},
    ]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["evaluate", str(src), "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["groundlens_method"] for r in rows] == ["sgi", "dgi"]
    assert rows[0]["meta"] == {"k": 1}


@pytest.mark.parametrize("content,expected", [
    (b"question,answer\nq,a\n", "missing column(s) response"),
    (b"question,response\n\xff\xfe bad bytes,x\n", "not UTF-8"),
])
def test_evaluate_bad_files_exit_2_with_one_line(tmp_path, capsys, content, expected):
    src = tmp_path / "bad.csv"
    src.write_bytes(content)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_missing_input_and_bad_extension(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "none.csv"), "-o", str(tmp_path / "o.csv")]) == 2
    (tmp_path / "x.txt").write_text("question,response\n")
    assert main(["evaluate", str(tmp_path / "x.txt"), "-o", str(tmp_path / "o.csv")]) == 2
    assert "unsupported file type" in capsys.readouterr().err


def test_calibrate_then_check_with_it(tmp_path, capsys):
    pairs = _write_csv(tmp_path / "pairs.csv", [
        {"question": "What is the capital of France?", "response": "Paris is the capital of France."},
        {"question": "Who wrote Hamlet?", "response": "William Shakespeare wrote Hamlet."},
        {"question": "What is H2O?", "response": "Water."},
    ], ["question", "response"])
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--pairs", str(pairs), "--output", str(cal)]) == 0
    assert json.loads(cal.read_text())["n_pairs"] == 3
    capsys.readouterr()
    assert main(["check", "-q", "Who painted the Mona Lisa?", "-r", "Leonardo da Vinci painted it.", "--calibration", str(cal), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["direction"].startswith("calibration:")


def test_benchmark_prints_baselines(capsys):
    assert main(["benchmark", "--limit", "60"]) == 0
    out = capsys.readouterr().out
    for needle in ("HaluEval QA", "sgi", "baseline: shorter response", "word overlap with context", "held-out", "dgi", "MIT"):
        assert needle in out


@pytest.mark.parametrize("backend", ["", "packed-torch"])
def test_doctor(capsys, monkeypatch, backend):
    """Passes on the default backend (ONNX Runtime, fp32) and on the packed torch pass: the bundled
    DGI direction serves every pass of the same weights."""
    if backend:
        monkeypatch.setenv("GROUNDLENS_BACKEND", backend)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "fingerprint" in out and "all checks passed" in out and "FAIL" not in out
    assert f"embedder: {backend or 'onnx-fp32'}," in out


def test_console_script_errors_without_traceback(tmp_path):
    exe = shutil.which("groundlens", path=str(Path(sys.executable).parent))
    assert exe, "the groundlens console script is not installed next to this Python"
    proc = subprocess.run([exe, "check", "-q", "  ", "-r", "x"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "groundlens: error: question is blank"
    assert "Traceback" not in proc.stderr


def test_evaluate_html_and_report_from_a_saved_trace(tmp_path, capsys):
    from groundlens_core.trace import Trace

    rows = [
        {"question": Q, "response": "The Oberoi Group's head office is in Delhi, India.", "context": CTX, "node": "qa"},
        {"question": Q, "response": "<script>alert(1)</script>", "context": CTX, "node": "qa"},
        {"question": "", "response": "no question", "context": "", "node": "bad"},
    ]
    src = _write_csv(tmp_path / "in.csv", rows, ["question", "response", "context", "node"])
    html = tmp_path / "batch.html"
    assert main(["evaluate", str(src), "-o", str(tmp_path / "out.csv"), "--html", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page and "not verdicts of truth" in page
    assert page.count('"band":"error"') >= 1

    # a saved agent trace -> report
    from groundlens_core.trace import CallRecord, Recorder

    rec = Recorder("test", name="saved-run")
    rec.record(CallRecord("k", "answer", question=Q, response="Delhi.", context=[CTX]))
    trace_path = tmp_path / "trace.json"
    rec.get_trace().save(trace_path)
    out = tmp_path / "report.html"
    capsys.readouterr()
    assert main(["report", str(trace_path), "-o", str(out)]) == 0
    assert "saved-run" in out.read_text(encoding="utf-8") and "1 steps" in capsys.readouterr().out
    assert Trace.load(trace_path).steps[0].method == "sgi"
    (tmp_path / "junk.json").write_text('{"hello": 1}')
    assert main(["report", str(tmp_path / "junk.json"), "-o", str(out)]) == 2


def test_batch_report_keeps_id_and_named_columns_and_groups_by_a_column(tmp_path):
    from test_html_report import parse

    rows = [
        {"id": "q-17", "note": "from the pilot", "team": "red", "question": Q, "context": CTX,
         "response": "The Oberoi Group's head office is in Delhi, India."},
        {"id": "q-18", "note": "second", "team": "red", "question": Q, "context": CTX,
         "response": "The head office is in Mumbai, with 900 staff."},
        {"id": "q-19", "note": "third", "team": "blue", "question": Q, "context": CTX, "response": ""},
    ]
    src = _write_csv(tmp_path / "in.csv", rows, ["id", "note", "team", "question", "response", "context"])
    html = tmp_path / "batch.html"
    argv = ["evaluate", str(src), "-o", str(tmp_path / "out.csv"), "--html", str(html)]
    assert main([*argv, "--keep-columns", "note", "--group-by", "team"]) == 0
    p = parse(html.read_text(encoding="utf-8"))
    assert {r["data-id"] for r in p.rows} == {"q-17", "q-18", "q-19"}  # labelled by the user's id
    assert {r["data-node"] for r in p.rows} == {"red", "blue"}  # grouped, not one node per row
    assert {r["data-node"] for r in p.node_rows} == {"red", "blue"}
    page = html.read_text(encoding="utf-8")
    assert "from the pilot" in page and '\\"id\\": \\"q-17\\"' in page  # kept columns in the details
    assert main([*argv, "--group-by", "nope"]) == 2


def test_progress_bar_goes_to_stderr(tmp_path, capsys):
    rows = [{"question": f"What is {i} plus {i}?", "response": f"It is {2 * i}."} for i in range(5)]
    src = _write_csv(tmp_path / "in.csv", rows, ["question", "response"])
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--progress"]) == 0
    cap = capsys.readouterr()
    assert "groundlens evaluate: 100%" in cap.err and "5/5" in cap.err and "rows/s" in cap.err
    assert "groundlens evaluate" not in cap.out


def test_line_separators_inside_values_stay_in_their_row(tmp_path):
    """U+2028 / form feed inside a value: csv.writer does not quote them; they must not split a row."""
    rows = [{"id": "1", "question": Q, "response": "It is in Delhi.\u2028(source: annual report)\x0cend", "context": CTX}]
    src = _write_csv(tmp_path / "in.csv", rows, ["id", "question", "response", "context"])
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 0
    got = list(csv.DictReader(open(tmp_path / "o.csv", encoding="utf-8", newline="")))
    assert len(got) == 1 and got[0]["groundlens_method"] == "sgi" and got[0]["response"] == rows[0]["response"]
    # JSONL written by us (ensure_ascii=False keeps U+2028 raw) reads back as one row
    assert main(["evaluate", str(tmp_path / "o.csv"), "-o", str(tmp_path / "o.jsonl")]) == 0
    assert main(["evaluate", str(tmp_path / "o.jsonl"), "-o", str(tmp_path / "o2.jsonl")]) == 0
    back = [json.loads(x) for x in (tmp_path / "o2.jsonl").read_text(encoding="utf-8").split("\n") if x]
    assert len(back) == 1 and back[0]["response"] == rows[0]["response"]


@pytest.mark.parametrize("content,expected", [
    ('{"format": "groundlens-calibration"}', "missing the field 'direction'"),
    ("[1, 2]", "not a groundlens calibration file"),
    ('{"format": "groundlens-calibration", "direction": "abc", "dim": 3, "n_pairs": 1, "concentration": 1, "fingerprint": "x"}',
     "malformed"),
])
def test_malformed_calibration_is_a_one_line_error(tmp_path, capsys, content, expected):
    cal = tmp_path / "cal.json"
    cal.write_text(content)
    assert main(["check", "-q", "Q?", "-r", "A.", "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1


def test_bad_batch_size_and_lone_surrogates(tmp_path, capsys):
    src = _write_csv(tmp_path / "in.csv", [{"question": "Q?", "response": "A."}], ["question", "response"])
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--batch-size", "0"])
    assert exc.value.code == 2
    assert main(["check", "-q", "Where\udcff?", "-r", "x"]) == 2
    assert "not valid Unicode text" in capsys.readouterr().err


def test_a_lone_surrogate_in_a_jsonl_row_is_written_escaped_to_parquet(tmp_path):
    """JSON can carry an undecodable byte as a lone surrogate; Parquet holds UTF-8 only, so the cell
    is written escaped, as the CSV and JSONL writers write it, and no row is lost."""
    import pyarrow.parquet as pq

    src = tmp_path / "in.jsonl"
    rows = [
        {"question": "What is it?", "context": "It is a cat.", "response": "It is a cat \ud800."},
        {"question": "What is it?", "context": "It is a cat.", "response": "It is a cat."},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.parquet")]) == 0
    written = pq.read_table(tmp_path / "o.parquet").to_pylist()
    assert [r["response"] for r in written] == ["It is a cat \\ud800.", "It is a cat."]
