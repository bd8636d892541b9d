"""Hostile files and values, through the real ``groundlens`` command: JSON nested far too deep in
every reader, wrong types in a trace, a number too long to convert, control characters in a path,
a bad number for an option. Each is one line naming the file (or flag), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_io import one_line_error

from groundlens_core.cli import main
from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger import Ledger, decision_record, write_keypair

DEEP = "[" * 100_000 + "]" * 100_000  # far past the interpreter's recursion limit


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    private, public, _ = write_keypair(tmp_path_factory.mktemp("keys") / "k")
    return private, public


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the command gets as far as loading the model."""
    import groundlens_core.scoring as scoring

    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(scoring, "get_default_embedder", loaded)


def _ledger(path: Path, key: Path) -> bytes:
    Ledger(path, key).append([decision_record(method="sgi", band="trusted", response=f"r{i}") for i in range(3)])
    return path.read_bytes()


# ---------------------------------------------------------------- deeply nested JSON


def test_verify_reports_a_deeply_nested_line_as_tampering_in_one_line(tmp_path, keys, capsys):
    """A RecursionError traceback with exit 1, the status that means 'tampered', for the wrong reason."""
    path = tmp_path / "L.jsonl"
    path.write_bytes(_ledger(path, keys[0]) + DEEP.encode() + b"\n")
    assert main(["verify", str(path), "--public-key", str(keys[1])]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err and out.err == ""
    assert out.out.strip() == f"{path}: line 4: changed: not a groundlens record in canonical form"


def test_evaluate_refuses_a_ledger_whose_last_line_is_deeply_nested(tmp_path, keys, capsys, no_model):
    path = tmp_path / "L.jsonl"
    data = _ledger(path, keys[0]) + b'{"seq":' + DEEP.encode() + b"}\n"
    path.write_bytes(data)
    (tmp_path / "s.csv").write_text("question,response\nq,r\n")
    assert main(["evaluate", str(tmp_path / "s.csv"), "-o", str(tmp_path / "o.csv"), "--ledger", str(path),
                 "--signing-key", str(keys[0])]) == 2
    assert f"the ledger {path} line 4 is not a groundlens record" in one_line_error(capsys)
    assert path.read_bytes() == data and not (tmp_path / "o.csv").exists()


def _deep_jsonl(path: Path, label: bool = False) -> Path:
    good = {"question": "q", "response": "r", "context": "c", **({"label": 1} if label else {})}
    path.write_text(json.dumps(good) + "\n" + '{"question": ' + DEEP + ', "response": "r"}\n')
    return path


def test_a_deeply_nested_jsonl_row_is_one_line_naming_the_file_and_line(tmp_path, capsys, no_model):
    src = _deep_jsonl(tmp_path / "deep.jsonl")
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 2
    assert f"{src}:2: JSON nested too deeply (more than 200 levels)" in one_line_error(capsys)
    assert not (tmp_path / "o.csv").exists()
    data = _deep_jsonl(tmp_path / "labelled.jsonl", label=True)
    assert main(["benchmark", "--data", str(data), "--bootstrap", "10"]) == 2
    assert f"{data}:2: JSON nested too deeply" in one_line_error(capsys)


def test_a_deeply_nested_calibration_file_is_one_line_naming_it(tmp_path, capsys, no_model):
    cal = tmp_path / "deep.json"
    cal.write_text(DEEP)
    assert main(["check", "-q", "a question?", "-r", "an answer.", "--calibration", str(cal)]) == 2
    assert f"calibration file {cal}: JSON nested too deeply" in one_line_error(capsys)


def test_nesting_a_user_may_have_reads_and_the_bound_ignores_brackets_inside_strings():
    from groundlens_core.batch.json_input import MAX_DEPTH, loads, too_deep

    value = loads("[" * MAX_DEPTH + "]" * MAX_DEPTH, name="x")
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []
    assert not too_deep(json.dumps({"text": "[" * 10_000, "more": ["{" * 500]}))
    with pytest.raises(GroundlensInputError, match=r"^x:3: JSON nested too deeply"):
        loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), name="x:3")


# ---------------------------------------------------------------- numbers and messages


def test_a_5000_digit_integer_in_a_jsonl_row_names_the_file_and_line(tmp_path, capsys, no_model):
    src = tmp_path / "big.jsonl"
    src.write_text('{"question": "q", "response": "r"}\n{"question": "q", "response": "r", "x": ' + "9" * 5000 + "}\n")
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv")]) == 2
    err = one_line_error(capsys)
    assert err == f"groundlens: error: {src}:2: a number has more than 4300 digits", err


def test_control_characters_in_a_path_are_shown_as_escapes_never_raw(tmp_path, capsys, no_model):
    name = tmp_path / "no\x1b[31mred\x07.csv"
    assert main(["evaluate", str(name), "-o", str(tmp_path / "o.csv")]) == 2
    err = one_line_error(capsys)
    assert "\x1b" not in err and "\x07" not in err
    assert "no\\x1b[31mred\\x07.csv" in err, err


def test_a_bad_number_for_an_option_says_what_it_must_be(tmp_path, capsys):
    for flag in ("--html-rows", "--batch-size", "--threads"):
        with pytest.raises(SystemExit) as stop:
            main(["evaluate", "s.csv", "-o", str(tmp_path / "o.csv"), flag, "x"])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: must be a whole number, got 'x'" in err and "_positive_int" not in err, err


# ---------------------------------------------------------------- wrong types in a trace file


def _trace() -> dict:
    from groundlens_core.trace.model import Step, Trace

    trace = Trace(id="t1", name="demo", framework="langgraph", started_at="2026-01-01T00:00:00Z")
    score = {
        "method": "sgi", "value": 1.2, "normalized": 0.7, "flagged": False, "triage": "trusted",
        "explanation": "Score 0.70, trusted: fine.", "fingerprint": "f", "backend": "b", "version": "0",
        "d_response_question": 1.0, "d_response_context": 0.8, "context_mode": "whole", "context_chunks": 1,
        "rank": 0.7, "support": 1.0, "evidence": None,
    }
    trace.steps.append(Step(id="s1", index=0, node="answer", kind="llm", method="sgi", result=score,
                            triage="trusted", question="q?", response="a.", context=()))
    return trace.to_dict()


def _with(change) -> dict:
    data = _trace()
    change(data)
    return data


WRONG_TYPES = {
    "a name that is an object": (lambda d: d.update(name={"a": 1}), "the trace: name must be text, got an object"),
    "a fingerprint that is an object": (lambda d: d.update(fingerprint={"x": 1}), "fingerprint must be text or null"),
    "a step method that is a list": (lambda d: d["steps"][0].update(method=["sgi"]), "method must be one of"),
    "an index of 1e999": (lambda d: d["steps"][0].update(index=1e999), "index must be a whole number"),
    "a score's evidence that is text": (lambda d: d["steps"][0]["result"].update(evidence="x"), "evidence must be"),
    "a score's support that is text": (lambda d: d["steps"][0]["result"].update(support="high"), "support must be"),
    "a text whose length is text": (
        lambda d: d["steps"][0].update(response={"redacted": True, "hmac_sha256": "0" * 64, "length": "x"}),
        "response's length must be a whole number"),
    "a latency that is text": (lambda d: d["steps"][0].update(llm_latency_ms="fast"), "llm_latency_ms must be a number"),
    "a status outside its values": (lambda d: d.update(status="done"), "status must be one of ok, error"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_trace_field_of_the_wrong_type_is_one_line_naming_the_file_and_field(tmp_path, capsys, case):
    """Each was a traceback in `groundlens report` (a TypeError, OverflowError, AttributeError ...)."""
    from groundlens_core.trace.model import Trace

    change, expected = WRONG_TYPES[case]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_with(change), allow_nan=True))
    out = tmp_path / "r.html"
    assert main(["report", str(bad), "-o", str(out)]) == 2
    err = one_line_error(capsys)
    assert str(bad) in err and expected in err, err
    assert not out.exists()
    with pytest.raises(GroundlensInputError, match=expected.replace("(", r"\(")) as raised:
        Trace.load(bad)
    assert str(bad) in str(raised.value)


def test_a_well_typed_trace_still_reads_and_renders(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_trace()))
    assert main(["report", str(good), "-o", str(tmp_path / "r.html")]) == 0
    assert "1 steps from 1 trace(s)" in capsys.readouterr().out


def test_a_saved_hand_built_score_with_missing_fields_still_reads(tmp_path):
    """A score dict without some fields reads with them None and is saved so; it must read back."""
    from groundlens_core.trace.model import Trace

    data = _trace()
    for name in ("backend", "d_response_question", "explanation"):
        del data["steps"][0]["result"][name]
    first = Trace.from_dict(data)
    saved = tmp_path / "t.json"
    first.save(saved)
    again = Trace.load(saved)
    assert again.steps[0].result.backend is None and again.steps[0].result.value == 1.2
