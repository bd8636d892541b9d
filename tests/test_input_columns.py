"""A file's own column names: ``--question-col/--context-col/--response-col/--id-col`` on the command
line, ``columns=`` in Python, and a missing column that names the closest one the file has."""

from __future__ import annotations

import csv
import json

import pytest
from cli_io import interrupt, one_line_error, write_csv

from groundlens_core import evaluate_stream
from groundlens_core.batch.input_columns import InputColumns
from groundlens_core.cli import main
from groundlens_core.errors import GroundlensInputError
from groundlens_core.stream import EvaluateJob, run_evaluate

CTX = "The Oberoi Group is a hotel company with its head office in Delhi. It was founded in 1934."
ROWS = [
    {"id": "q-1", "question": "Where is the head office?", "context": CTX, "response": "The head office is in Delhi."},
    {"id": "q-2", "question": "When was it founded?", "context": CTX, "response": "It was founded in 1954."},
    {"id": "q-3", "question": "What is the capital of France?", "context": "", "response": "Paris is the capital."},
]
RENAMED = {"id": "ref", "question": "query", "context": "passage", "response": "answer"}
OPTIONS = ["--id-col", "ref", "--question-col", "query", "--context-col", "passage", "--response-col", "answer"]


def _renamed(rows: list[dict]) -> list[dict]:
    return [{RENAMED[k]: v for k, v in r.items()} for r in rows]


def _read(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _scores(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k.startswith("groundlens_")} for r in rows]


def test_a_query_passage_answer_file_is_scored_with_the_column_options(tmp_path, capsys):
    plain = write_csv(tmp_path / "plain.csv", ROWS)
    renamed = write_csv(tmp_path / "renamed.csv", _renamed(ROWS))
    assert main(["evaluate", str(plain), "-o", str(tmp_path / "plain.out.csv")]) == 0
    assert main(["evaluate", str(renamed), "-o", str(tmp_path / "renamed.out.csv"), *OPTIONS]) == 0
    want, got = _read(tmp_path / "plain.out.csv"), _read(tmp_path / "renamed.out.csv")
    assert list(got[0])[:4] == ["ref", "query", "passage", "answer"]  # the file's own columns, unchanged
    assert _scores(got) == _scores(want)  # the same scores, byte for byte
    assert [r["groundlens_method"] for r in got] == ["sgi", "sgi", "dgi"]  # an empty passage: no context
    assert got[1]["groundlens_triage"] == "flagged"


def test_a_missing_column_names_the_closest_found_column(tmp_path, capsys):
    renamed = write_csv(tmp_path / "renamed.csv", _renamed(ROWS))
    assert main(["evaluate", str(renamed), "-o", str(tmp_path / "o.csv")]) == 2
    err = one_line_error(capsys)
    assert "missing column(s) question" in err and "closest found: 'query' (--question-col query)" in err
    assert "response, closest found: 'answer' (--response-col answer)" in err
    assert "found: ref, query, passage, answer" in err
    # a given name that is not in the file: named as given, with the column it probably meant
    assert (
        main(
            [
                "evaluate",
                str(renamed),
                "-o",
                str(tmp_path / "o.csv"),
                "--question-col",
                "query",
                "--context-col",
                "passage",
                "--response-col",
                "answr",
            ]
        )
        == 2
    )
    err = one_line_error(capsys)
    assert "missing column(s) 'answr' (the response column), closest found: 'answer'" in err
    # nothing close: no guess
    nothing = write_csv(tmp_path / "nothing.csv", [{"alpha": "a", "beta": "b"}])
    assert main(["evaluate", str(nothing), "-o", str(tmp_path / "o.csv")]) == 2
    err = one_line_error(capsys)
    assert "missing column(s) question; response; found: alpha, beta" in err and "closest" not in err
    assert not (tmp_path / "o.csv").exists()


def test_the_batch_report_labels_rows_by_the_named_id_column(tmp_path):
    from test_html_report import parse

    renamed = write_csv(tmp_path / "renamed.csv", _renamed(ROWS))
    html = tmp_path / "report.html"
    assert main(["evaluate", str(renamed), "-o", str(tmp_path / "o.csv"), "--html", str(html), *OPTIONS]) == 0
    page = parse(html.read_text(encoding="utf-8"))
    assert {r["data-id"] for r in page.rows} == {"q-1", "q-2", "q-3"}
    data = json.loads([body for attrs, body in page.scripts if attrs.get("type") == "application/json"][0])
    assert sorted(r["step"] for r in data["rows"]) == ["q-1", "q-2", "q-3"]  # what the Row column shows


def test_the_python_file_job_takes_columns(tmp_path):
    renamed = write_csv(tmp_path / "renamed.csv", _renamed(ROWS))
    plain = write_csv(tmp_path / "plain.csv", ROWS)
    plain_summary = run_evaluate(EvaluateJob(input=plain, output=tmp_path / "a.csv"), log=lambda m: None)
    job = EvaluateJob(
        input=renamed,
        output=tmp_path / "b.csv",
        columns={"question": "query", "context": "passage", "response": "answer", "id": "ref"},
    )
    summary = run_evaluate(job, log=lambda m: None)
    assert summary.rows == 3 and summary.counts == plain_summary.counts and summary.methods == {"sgi": 2, "dgi": 1}
    assert _scores(_read(tmp_path / "b.csv")) == _scores(_read(tmp_path / "a.csv"))
    with pytest.raises(GroundlensInputError, match="closest found: 'answer'"):
        run_evaluate(EvaluateJob(input=renamed, output=tmp_path / "c.csv", columns={"question": "query"}))


def test_a_resume_refuses_other_columns(tmp_path, monkeypatch, capsys):
    """The columns read are part of what a resume checks: other names would score other texts."""
    rows = [dict(r, id=f"q-{i}") for i in range(4) for r in ROWS]
    renamed = write_csv(tmp_path / "renamed.csv", [dict(r, passage2=r["passage"]) for r in _renamed(rows)])
    out = tmp_path / "o.csv"
    argv = ["evaluate", str(renamed), "-o", str(out), "--batch-size", "4", *OPTIONS]
    interrupt(monkeypatch, argv, chunks=1)
    other = [a if a != "passage" else "passage2" for a in argv]
    assert main([*other, "--resume"]) == 2
    assert "input_columns changed" in one_line_error(capsys)
    assert main([*argv, "--resume"]) == 0


def test_evaluate_stream_reads_rows_by_the_given_keys():
    want = list(evaluate_stream(ROWS))
    got = list(evaluate_stream(_renamed(ROWS), columns=RENAMED, batch_size=2))
    assert got == want
    with pytest.raises(
        GroundlensInputError,
        match=r"missing column\(s\) response, closest found: 'answer' \(columns=\{'response': 'answer'\}\)",
    ):
        list(evaluate_stream(_renamed(ROWS), columns={"question": "query", "context": "passage"}))
    # tuples are not read by name
    assert list(evaluate_stream([("Where?", "In Delhi.", CTX)], columns=RENAMED))[0].method == "sgi"


@pytest.mark.parametrize(
    "value,message",
    [
        ({"answer": "x"}, "unknown column role"),
        ({"question": ""}, "non-empty string"),
        ({"question": "text", "response": "text"}, "more than one of question, response"),
        (["query"], "must be a mapping"),
    ],
)
def test_bad_column_names_are_one_line_errors(value, message):
    with pytest.raises(GroundlensInputError, match=message):
        InputColumns.of(value)


def test_the_id_may_be_any_column():
    assert InputColumns.of({"id": "question"}).id == "question"


def test_a_file_without_a_context_column_is_scored_with_a_warning_naming_the_closest_column(tmp_path, capsys):
    """question/response and the source in ``passage``: every row would be scored by DGI alone, silently."""
    rows = [{"question": r["question"], "response": r["response"], "passage": r["context"]} for r in ROWS[:2]]
    path = write_csv(tmp_path / "passage.csv", rows)
    assert main(["evaluate", str(path), "-o", str(tmp_path / "o.csv")]) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, err
    assert f"{path}: no column context" in warning[0] and "without a source" in warning[0]
    assert "closest found: 'passage' (--context-col passage)" in warning[0]
    assert [r["groundlens_method"] for r in _read(tmp_path / "o.csv")] == ["dgi", "dgi"]
    # a misspelt name is offered by its spelling; a file with a context column gets no warning
    assert (
        InputColumns()
        .context_warning(["question", "response", "contxt"], where="typo.csv")
        .endswith("closest found: 'contxt' (--context-col contxt)")
    )
    assert "columns={'context': 'contxt'}" in InputColumns().context_warning(
        ["question", "response", "contxt"], where="rows", python=True
    )
    assert main(["evaluate", str(write_csv(tmp_path / "ok.csv", ROWS[:1])), "-o", str(tmp_path / "ok.out.csv")]) == 0
    assert "warning:" not in capsys.readouterr().err
    # nothing like a source: the warning still says the rows have none, with no guess
    bare = InputColumns().context_warning(["question", "response", "id"], where="bare.csv")
    assert bare.startswith("warning: bare.csv: no column context") and "closest" not in bare
