"""Edges of the batch command and its neighbours, found by hostile probing: files a run would delete,
input columns it would replace, a report that would hold megabytes, a stray quote, a resume that
changed what it scores with, formulas in our own columns, escape sequences on the terminal, names
of columns that are not there, a full ledger disk, a missing benchmark file, a bad ledger setting,
a missing home folder, a trace out of its format, and a reader that goes away."""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_io import interrupt, one_line_error, write_csv

from groundlens_core.batch.columns import OUT_COLUMNS
from groundlens_core.cli import main
from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger import Ledger, LedgerWriteError, decision_record, write_keypair

# ---------------------------------------------------------------- a scorer that needs no model


def _cells(item: dict) -> dict:
    """The appended cells a row gets from the fake scorer: an error for a response over 1,000
    characters (as GROUNDLENS_MAX_CHARS would), else a flagged score whose weakest sentence is the
    response itself."""
    cells = dict.fromkeys(OUT_COLUMNS)
    response = str(item.get("response"))
    if len(response) > 1000:
        cells.update(
            groundlens_method="error",
            groundlens_triage="error",
            groundlens_error=f"response has {len(response):,} characters; the limit is 1,000",
        )
        return cells
    cells.update(
        groundlens_method="sgi",
        groundlens_value=1.0,
        groundlens_normalized=0.25,
        groundlens_flagged=True,
        groundlens_triage="flagged",
        groundlens_score=0.25,
        groundlens_support=0.5,
        groundlens_weakest_sentence=response,
        groundlens_unsupported=response.split()[0] if response.split() else "",
        groundlens_facts=response,
    )
    return cells


@pytest.fixture
def fake_scoring(monkeypatch):
    """``evaluate`` with a fake embedder and scorer: what is under test is the file job, not the scores."""
    import groundlens_core.batch.chunks as chunks
    import groundlens_core.scoring as scoring

    monkeypatch.setattr(
        scoring, "get_default_embedder", lambda *a, **k: SimpleNamespace(fingerprint="fake", backend="fake")
    )
    monkeypatch.setattr(chunks, "score_chunk", lambda items, *a, **k: [_cells(it) for it in items])


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the command gets as far as loading the model."""
    import groundlens_core.scoring as scoring

    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(scoring, "get_default_embedder", loaded)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    private, public, _ = write_keypair(tmp_path_factory.mktemp("keys") / "k")
    return private, public


def _rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "question": f"What is item {i}?", "response": f"Item {i} is blue.", "context": "x"}
            for i in range(n)]


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------- a file the run would delete


@pytest.mark.parametrize("option", ["--ledger", "--html"])
def test_a_ledger_or_report_inside_the_partial_folder_of_a_parquet_output_is_refused(
    tmp_path, keys, capsys, no_model, option
):
    """Accepted, then deleted with the folder when the run completed (exit 0; verify found no ledger)."""
    pytest.importorskip("pyarrow")
    src = write_csv(tmp_path / "in.csv", _rows(3))
    inside = tmp_path / ".o.parquet.groundlens-partial" / ("audit.jsonl" if option == "--ledger" else "r.html")
    argv = ["evaluate", str(src), "-o", str(tmp_path / "o.parquet"), option, str(inside)]
    if option == "--ledger":
        argv += ["--signing-key", str(keys[0])]
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert f"{inside} is inside the partial output .o.parquet.groundlens-partial of" in err, err
    assert "removes when it completes" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # no folder made, nothing left


def test_an_input_inside_the_partial_folder_is_refused(tmp_path, capsys, no_model):
    folder = tmp_path / ".o.parquet.groundlens-partial"
    folder.mkdir()
    src = write_csv(folder / "in.csv", _rows(2))
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.parquet")]) == 2
    assert f"the input file {src} is inside the partial output" in one_line_error(capsys)
    assert src.is_file()


# ---------------------------------------------------------------- input columns named as ours


def test_an_input_column_named_as_one_of_ours_is_kept_under_another_name(tmp_path, capsys, fake_scoring):
    """``groundlens_triage=EVIL`` vanished: the column was replaced by ours without a word."""
    rows = [{**r, "groundlens_triage": "EVIL", "input_groundlens_error": "taken"} for r in _rows(3)]
    src = write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / "o.csv"
    assert main(["evaluate", str(src), "-o", str(out)]) == 0
    got = _read_csv(out)
    header = list(got[0])
    assert header[: len(rows[0])] == ["id", "question", "response", "context", "input_groundlens_triage",
                                       "input_groundlens_error"]
    assert [r["input_groundlens_triage"] for r in got] == ["EVIL"] * 3  # the input's value, kept
    assert [r["groundlens_triage"] for r in got] == ["flagged"] * 3  # ours beside it

    from groundlens_core.batch.io_formats import output_columns, renamed_inputs

    cols = ["groundlens_error", "input_groundlens_error", "input_input_groundlens_error"]
    assert renamed_inputs(cols) == {"groundlens_error": "input_input_input_groundlens_error"}
    assert len(set(output_columns(cols))) == len(output_columns(cols))  # no name written twice


def test_a_parquet_input_column_named_as_ours_keeps_its_type_under_its_new_name(tmp_path, capsys, fake_scoring):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    table = pa.table({"question": ["q1", "q2"], "response": ["a b", "c d"], "groundlens_score": [7, 8]})
    pq.write_table(table, src)
    out = tmp_path / "o.parquet"
    assert main(["evaluate", str(src), "-o", str(out)]) == 0
    got = pq.read_table(out)
    assert got.column("input_groundlens_score").to_pylist() == [7, 8]
    assert pa.types.is_integer(got.schema.field("input_groundlens_score").type)
    assert got.column("groundlens_score").to_pylist() == [0.25, 0.25]


# ---------------------------------------------------------------- the HTML report of rows refused as too long


def test_the_report_cuts_the_texts_of_error_rows(tmp_path, capsys, fake_scoring):
    """300 rows of 1 MB responses peaked at 2.5 GB and wrote a 300 MB report: error rows were embedded whole."""
    long = "word " * 40_000  # 200,000 characters, refused by the fake scorer
    rows = [{"id": f"r{i}", "question": "q", "response": long + str(i), "context": "c", "note": long} for i in range(5)]
    src = write_csv(tmp_path / "in.csv", rows)
    html = tmp_path / "r.html"
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(html),
                 "--keep-columns", "note"]) == 0
    text = html.read_text(encoding="utf-8")
    assert len(text) < 5 * 5 * 3000 + 2_000_000  # not 5 rows x 2 texts x 200,000 characters
    assert long[:5000] not in text
    assert "cut for the report: 200,001 characters" in text
    assert "response has 200,001 characters" in text  # the recorded error is shown


# ---------------------------------------------------------------- a stray quote in a CSV


@pytest.mark.parametrize(
    "body,says",
    [
        ('q1,"r1 oops,c1\nq2,r2,c2\nq3,r3,c3\n', "line 2: a quote opens a cell that is never closed"),
        ('q1,"r1 oops,c1\nq2,r2,c2\nq3,"r3" x,c3\nq4,r4,c4\n', "line 2: a quoted cell goes on to line 4"),
    ],
)
def test_a_stray_quote_that_would_swallow_rows_is_a_line_numbered_error(tmp_path, capsys, no_model, body, says):
    """One stray quote made the rest of the file one cell: exit 0, 'scored 4/5 rows' for 1,000 lines."""
    src = tmp_path / "in.csv"
    src.write_text("question,response,context\n" + body, encoding="utf-8")
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 2
    err = one_line_error(capsys)
    assert f"{src}: {says}" in err and "stray double quote" in err, err
    assert not (tmp_path / "o.csv").exists()


def test_quotes_inside_cells_that_are_written_properly_are_still_read(tmp_path, capsys, fake_scoring):
    src = tmp_path / "in.csv"
    src.write_text('question,response\nq1,He said "hi" twice\nq2,"a ""quoted"" word, and a comma"\n')
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 0
    assert [r["response"] for r in _read_csv(tmp_path / "o.csv")] == [
        'He said "hi" twice', 'a "quoted" word, and a comma'
    ]


# ---------------------------------------------------------------- a resume proves what it continues


def test_a_resume_with_another_text_limit_is_refused(tmp_path, capsys, monkeypatch, fake_scoring):
    """The output of a resume after GROUNDLENS_MAX_CHARS changed matched neither uninterrupted run."""
    import groundlens_core.scoring as scoring

    src = write_csv(tmp_path / "in.csv", _rows(12))
    out = tmp_path / "o.csv"
    argv = ["evaluate", str(src), "-o", str(out), "--batch-size", "3"]
    interrupt(monkeypatch, argv, chunks=2)
    monkeypatch.setattr(scoring, "MAX_TEXT_CHARS", 100)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = one_line_error(capsys)
    assert "cannot resume: max_chars changed" in err and "GROUNDLENS_MAX_CHARS was 200000, is 100 now" in err, err
    monkeypatch.undo()


def test_ledger_text_added_only_at_the_resume_is_refused(tmp_path, keys, capsys, monkeypatch, fake_scoring):
    """40 records without texts, 60 with: the resume took --ledger-text the interrupted run did not have."""
    src = write_csv(tmp_path / "in.csv", _rows(12))
    out = tmp_path / "o.csv"
    argv = ["evaluate", str(src), "-o", str(out), "--batch-size", "3", "--ledger", str(tmp_path / "L.jsonl"),
            "--signing-key", str(keys[0])]
    interrupt(monkeypatch, argv, chunks=2)
    capsys.readouterr()
    assert main([*argv, "--ledger-text", "--resume"]) == 2
    err = one_line_error(capsys)
    assert "cannot resume: ledger_text changed" in err and "--ledger-text was off, is on now" in err, err
    assert main([*argv, "--resume"]) == 0  # as before: continued
    records = [json.loads(line) for line in (tmp_path / "L.jsonl").read_text().splitlines()]
    assert {r["row"] for r in records} == set(range(12)) and not any("text" in r for r in records)


# ---------------------------------------------------------------- formulas in our own columns


def test_our_text_columns_cannot_start_a_formula_in_a_csv(tmp_path, capsys, fake_scoring):
    """A response starting ``=HYPERLINK(...)`` was copied verbatim into groundlens_weakest_sentence."""
    starts = ['=HYPERLINK("http://x.example","click")', "+1 is more", "-5 degrees", "@SUM(A1)", "\tTab", "\rCR"]
    rows = [{"question": "q", "response": s, "context": "c"} for s in starts]
    src = write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / "o.csv"
    assert main(["evaluate", str(src), "-o", str(out)]) == 0
    got = _read_csv(out)
    for row, s in zip(got, starts):
        assert row["groundlens_weakest_sentence"] == "'" + s
        assert row["groundlens_facts"] == "'" + s
        assert row["response"] == s  # the input's own column is written as it was
        assert row["groundlens_value"] == "1.0" and row["groundlens_score"] == "0.25"
    jsonl = tmp_path / "o.jsonl"
    assert main(["evaluate", str(src), "-o", str(jsonl)]) == 0  # JSON is not opened by a spreadsheet
    lines = [json.loads(x) for x in jsonl.read_text(encoding="utf-8").splitlines()]
    assert [r["groundlens_weakest_sentence"] for r in lines] == starts


# ---------------------------------------------------------------- control characters on the terminal


def test_check_prints_no_raw_control_characters(capsys, monkeypatch):
    """``groundlens check`` printed ESC and BEL from the response: it could retitle and clear a terminal."""
    import groundlens_core.scoring as scoring

    hostile = "In 1999 \x1b]0;PWNED\x07 the \x1b[2J sky \x9b2J."
    res = SimpleNamespace(
        score=0.1, triage="flagged", method="sgi", value=1.5, normalized=0.2, support=0.5, evidence=None,
        explanation=f'Weakest sentence: "{hostile}".\nsecond line',
        to_json=lambda: json.dumps({"response": hostile}, ensure_ascii=False),
    )
    monkeypatch.setattr(scoring, "evaluate", lambda *a, **k: res)
    assert main(["check", "-q", "q", "-r", hostile, "-c", "c"]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\x9b")
    assert "\\x1b]0;PWNED\\x07" in out and out.splitlines()[-1] == "second line"
    assert main(["check", "--json", "-q", "q", "-r", hostile, "-c", "c"]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\x9b")
    assert json.loads(out)["response"] == hostile  # the same JSON value


# ---------------------------------------------------------------- names of columns that are not there


@pytest.mark.parametrize(
    "option,name,closest",
    [("--keep-columns", "notes", "note"), ("--id-col", "row_id", "rowid"), ("--keep-columns", "note,nocol", None)],
)
def test_a_named_column_the_input_lacks_is_refused_naming_the_closest(
    tmp_path, capsys, no_model, option, name, closest
):
    """``--keep-columns nocol`` and ``--id-col nocol`` were ignored without a word."""
    rows = [{**r, "note": "n", "rowid": "x"} for r in _rows(2)]
    src = write_csv(tmp_path / "in.csv", rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(tmp_path / "r.html"),
                 option, name]) == 2
    err = one_line_error(capsys)
    missing = name.split(",")[-1]
    assert f"{option} {missing}: {src} has no such column" in err, err
    if closest:
        assert f"closest found: {closest!r} ({option} {closest})" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


# ---------------------------------------------------------------- a full ledger disk


def _full_disk_after(monkeypatch, room: int):
    """``os.write`` in the ledger writer takes ``room`` more bytes, then fails as a full disk does."""
    import groundlens_core.ledger.writer as writer

    left = [room]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(data), left[0])
        left[0] -= n
        return os.write(fd, bytes(data[:n]))

    monkeypatch.setattr(writer, "os", SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")}))
    monkeypatch.setattr(writer.os, "write", write)


def test_a_full_ledger_disk_names_the_ledger(tmp_path, keys, capsys, monkeypatch, fake_scoring):
    """The error named the partial output file instead of the ledger."""
    src = write_csv(tmp_path / "in.csv", _rows(4))
    ledger = tmp_path / "L.jsonl"
    _full_disk_after(monkeypatch, 10)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--ledger", str(ledger),
                 "--signing-key", str(keys[0])]) == 2
    err = one_line_error(capsys)
    assert "No space left on device" in err and str(ledger) in err and "partial" not in err, err


def test_the_recorder_counts_only_the_records_a_full_disk_did_not_take(tmp_path, keys, monkeypatch, caplog):
    """The warning counted every record of the batch as unwritten, also those the file holds whole."""
    from groundlens_core.trace.recorder.ledger import LedgerListener

    ledger = Ledger(tmp_path / "L.jsonl", keys[0])
    probe = Ledger(tmp_path / "probe.jsonl", keys[0])
    probe.append([decision_record(method="sgi", band="trusted", response="r0")])
    one = len((tmp_path / "probe.jsonl").read_bytes())
    listener = LedgerListener(ledger)
    listener._bodies = [decision_record(method="sgi", band="trusted", response=f"r{i}") for i in range(10)]
    _full_disk_after(monkeypatch, 3 * one + one // 2)  # three records whole, the fourth cut
    with caplog.at_level(logging.WARNING, logger="groundlens.ledger"):
        listener.on_batch_end()
    assert "7 record(s) not written to the ledger" in caplog.text, caplog.text
    monkeypatch.undo()
    assert len((tmp_path / "L.jsonl").read_bytes().split(b"\n")) == 4  # three whole lines and the cut one

    with pytest.raises(LedgerWriteError) as info:
        _full_disk_after(monkeypatch, 0)
        ledger.append([decision_record(method="sgi", band="trusted", response="x")])
    assert info.value.written == 0 and info.value.filename == str(tmp_path / "L.jsonl")


# ---------------------------------------------------------------- benchmark files that are not there


@pytest.mark.parametrize("option", ["--claims", "--faithbench"])
def test_a_benchmark_file_that_is_not_there_is_an_error(tmp_path, capsys, no_model, option):
    """Skipped without a word, exit 0."""
    missing = tmp_path / "nofile.csv"
    assert main(["benchmark", option, str(missing)]) == 2
    assert f"{option} file not found: {missing}" in one_line_error(capsys)


# ---------------------------------------------------------------- the ledger text setting


def test_a_ledger_text_setting_that_is_neither_on_nor_off_is_an_error(tmp_path, keys, monkeypatch):
    """GROUNDLENS_LEDGER_TEXT=maybe turned the texts off without a word."""
    monkeypatch.setenv("GROUNDLENS_LEDGER", str(tmp_path / "L.jsonl"))
    monkeypatch.setenv("GROUNDLENS_SIGNING_KEY", str(keys[0]))
    monkeypatch.setenv("GROUNDLENS_LEDGER_TEXT", "maybe")
    with pytest.raises(GroundlensInputError, match="GROUNDLENS_LEDGER_TEXT='maybe' is not 1 or 0"):
        Ledger.from_env()
    for value, kept in (("on", True), ("TRUE", True), ("0", False), ("", False)):
        monkeypatch.setenv("GROUNDLENS_LEDGER_TEXT", value)
        assert Ledger.from_env().include_text is kept
    doc = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text(encoding="utf-8")
    assert "| `GROUNDLENS_LEDGER_TEXT` |" in doc


# ---------------------------------------------------------------- a home folder that does not exist


def test_a_home_folder_that_does_not_exist_is_not_made(tmp_path):
    """HOME=/nonexistent was created: the ONNX graph cache and ONNX Runtime's device id went under it."""
    home = tmp_path / "nonexistent"
    env = {k: v for k, v in os.environ.items() if k not in ("GROUNDLENS_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), GROUNDLENS_BACKEND="onnx-fp32")
    code = (
        "from groundlens_core.embedding import get_embedder\n"
        "from groundlens_core.embedding.onnx_backend import cache_dir\n"
        "import os\n"
        "e = get_embedder(); e.encode(['The sky is blue.'])\n"
        "print(cache_dir(), os.environ.get('XDG_CACHE_HOME'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "None"]  # no cache, and the setting put back
    assert not home.exists()


# ---------------------------------------------------------------- a trace out of its format


def _trace_dict() -> dict:
    from groundlens_core.trace import Step, Trace

    trace = Trace(id="t1", name="demo", framework="langgraph", started_at="2025-01-01T00:00:00Z")
    trace.add_step(Step(id="s1", index=0, node="n", kind="llm", method="error", triage="error", error="boom"))
    return trace.to_dict()


def test_report_refuses_a_trace_out_of_its_format_naming_the_field(tmp_path, capsys):
    """A trace without the fields schema.json requires, or with a score of 7.5, was rendered."""
    good = _trace_dict()
    (tmp_path / "good.json").write_text(json.dumps(good))
    assert main(["report", str(tmp_path / "good.json"), "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()

    no_version = {k: v for k, v in good.items() if k != "schema_version"}
    bad_step = json.loads(json.dumps(good))
    del bad_step["steps"][0]["triage"]
    scored = json.loads(json.dumps(good))
    scored["steps"][0].update(method="sgi", triage="review", error=None, result={
        "method": "sgi", "value": 1.0, "normalized": 0.5, "flagged": False, "triage": "review",
        "explanation": "x", "fingerprint": "f", "version": "0.1.0", "score": 7.5})
    for data, says in (
        (no_version, "trace: missing the field 'schema_version'"),
        (bad_step, "trace.steps[0]: missing the field 'triage'"),
        (scored, "trace.steps[0].result.score: 7.5 is above the maximum 1"),
        ([good, scored], "(trace 2 of 2): trace.steps[0].result.score: 7.5 is above the maximum 1"),
    ):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        assert main(["report", str(path), "-o", str(tmp_path / "bad.html")]) == 2
        err = one_line_error(capsys)
        assert f"{path} is not a groundlens trace" in err and says in err, err
        assert not (tmp_path / "bad.html").exists()


def test_the_format_check_agrees_with_a_json_schema_validator():
    jsonschema = pytest.importorskip("jsonschema")
    from groundlens_core.trace.model import json_schema
    from groundlens_core.trace.schema_check import schema_problem

    schema = json_schema()
    good = _trace_dict()
    cases = [good, {**good, "status": "nope"}, {**good, "extra": 1}, {**good, "steps": [{"id": "s"}]}]
    for data in cases:
        ours = schema_problem(data, schema) is None
        theirs = jsonschema.Draft202012Validator(schema).is_valid(data)
        assert ours == theirs, data


# ---------------------------------------------------------------- a reader that goes away


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path, capsys, monkeypatch):
    """``benchmark | head -1`` and ``check --json | head`` ended in "Broken pipe" with exit 2."""
    import groundlens_core.scoring as scoring

    res = SimpleNamespace(to_json=lambda: json.dumps({"a": "b" * 100_000}))
    monkeypatch.setattr(scoring, "evaluate", lambda *a, **k: res)

    class GoneReader(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", GoneReader())
    assert main(["check", "--json", "-q", "q", "-r", "r", "-c", "c"]) == 141
    assert capsys.readouterr().err == ""


def test_a_reader_that_goes_away_leaves_no_message_from_a_real_process(tmp_path):
    code = (
        "import sys, groundlens_core.scoring as s, types\n"
        "s.evaluate = lambda *a, **k: types.SimpleNamespace(to_json=lambda: 'x' * 1_000_000)\n"
        "from groundlens_core.cli import main\n"
        "sys.exit(main(['check', '--json', '-q', 'q', '-r', 'r', '-c', 'c']))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # as `head -c 10` does
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141
    assert err == "", err
