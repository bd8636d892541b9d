"""The one output writer (groundlens_core/batch/outputs.py) as every command that writes a file meets it:
never over an input, never into a FIFO or device, nothing half-written, mode and group kept, errors
that name the file. Also: malformed traces given to ``groundlens report`` and redacted texts."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_io import one_line_error, write_csv

from groundlens_core.cli import main
from groundlens_core.errors import GroundlensInputError
from groundlens_core.trace.model import Step, Trace, plain_text, redaction_digest, utc_now

PAIRS = [
    {"question": "What is the capital of France?", "response": "Paris is the capital of France."},
    {"question": "Who wrote Hamlet?", "response": "William Shakespeare wrote Hamlet."},
    {"question": "What is H2O?", "response": "Water."},
]


def _pairs(path: Path) -> Path:
    return write_csv(path, PAIRS, ["question", "response"])


def _trace(path: Path | None = None, response: str = "Paris.") -> Trace:
    trace = Trace(id="t1", name="saved-run", framework="test", started_at=utc_now())
    trace.steps.append(
        Step(id="s1", index=0, node="answer", kind="llm", method="skipped", question="Capital?", response=response)
    )
    if path is not None:
        trace.save(path)
    return trace


def _aliases(tmp_path: Path, target: Path) -> dict[str, Path]:
    """The target itself, a symlink to it and a hard link to it."""
    (tmp_path / "sym.json").symlink_to(target)
    os.link(target, tmp_path / "hard.json")
    return {"same path": target, "symlink": tmp_path / "sym.json", "hard link": tmp_path / "hard.json"}


# ---------------------------------------------------------------- an input is never the output


def test_calibrate_refuses_its_pairs_file_as_the_output(tmp_path, capsys):
    """`calibrate --pairs pairs.csv -o pairs.csv` replaced the labelled pairs with JSON (exit 0)."""
    pairs = _pairs(tmp_path / "pairs.csv")
    before = pairs.read_bytes()
    for how, out in _aliases(tmp_path, pairs).items():
        assert main(["calibrate", "--pairs", str(pairs), "-o", str(out)]) == 2, how
        assert "is the input file" in one_line_error(capsys), how
        assert pairs.read_bytes() == before, how


def test_report_refuses_its_trace_as_the_output(tmp_path, capsys):
    """`groundlens report tr.json -o tr.json` replaced the trace with HTML (exit 0)."""
    tr = tmp_path / "tr.json"
    _trace(tr)
    before = tr.read_bytes()
    for how, out in _aliases(tmp_path, tr).items():
        assert main(["report", str(tr), "-o", str(out)]) == 2, how
        assert "is the input file" in one_line_error(capsys), how
        assert tr.read_bytes() == before, how


# ---------------------------------------------------------------- FIFOs and devices


def _run(code: str, *, timeout: float = 300, fsize: int | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python, bounded in time; ``fsize`` caps the size of any file it writes
    (the kernel's RLIMIT_FSIZE: a real 'File too large' error, with SIGXFSZ ignored)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=limit
    )


def _cli_code(*args: str) -> str:
    return f"import sys\nfrom groundlens_core.cli import main\nsys.exit(main({list(args)!r}))"


@pytest.mark.parametrize("command", ["calibrate", "report"])
def test_a_fifo_or_a_device_as_the_output_is_refused_without_hanging(tmp_path, command):
    """`calibrate -o fifo` opened the FIFO for writing and waited for a reader for good."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    if command == "calibrate":
        source = ["--pairs", str(_pairs(tmp_path / "pairs.csv"))]
    else:
        _trace(tmp_path / "tr.json")
        source = [str(tmp_path / "tr.json")]
    for target, kind in ((fifo, "FIFO"), (Path(os.devnull), "device")):
        try:
            proc = _run(_cli_code(command, *source, "-o", str(target)), timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} -o {target} hung")
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and kind in lines[0] and str(target) in lines[0], proc.stderr
        assert target.exists() and not target.is_file()  # left as it was


# ---------------------------------------------------------------- failed writes


def test_a_calibration_write_that_fails_keeps_the_previous_file(tmp_path):
    """On a full disk `calibrate -o d.json` left d.json truncated and invalid."""
    pairs = _pairs(tmp_path / "pairs.csv")
    old = tmp_path / "d.json"
    assert main(["calibrate", "--pairs", str(pairs), "-o", str(old)]) == 0
    before = old.read_bytes()
    proc = _run(_cli_code("calibrate", "--pairs", str(pairs), "-o", str(old)), fsize=len(before) // 2)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "File too large" in line and repr(str(old)) in line, line
    assert old.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "pairs.csv"]


def test_a_report_write_that_fails_names_the_file_and_keeps_the_previous_one(tmp_path):
    """The error was '[Errno 27] File too large' with no file name."""
    tr = tmp_path / "tr.json"
    _trace(tr)
    html = tmp_path / "report.html"
    html.write_text("previous report\n")
    proc = _run(_cli_code("report", str(tr), "-o", str(html)), fsize=4096)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "File too large" in line and repr(str(html)) in line, line
    assert html.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "tr.json"]


def test_an_evaluate_write_that_fails_names_the_file(tmp_path):
    rows = [{"question": f"What is {i} plus {i}?", "response": f"It is {2 * i}. " * 20} for i in range(40)]
    src = tmp_path / "in.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["question", "response"])
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "out.csv"
    proc = _run(_cli_code("evaluate", str(src), "-o", str(out), "--batch-size", "4"), fsize=src.stat().st_size // 2)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "File too large" in line and ".out.csv.groundlens-partial" in line, line


# ---------------------------------------------------------------- mode and group


def _other_group() -> int | None:
    mine = os.stat(os.getcwd()).st_gid
    if os.geteuid() == 0:
        return 4242 if mine != 4242 else 4243
    return next((g for g in os.getgroups() if g != os.getegid()), None)


def test_replaced_files_keep_their_mode_and_group(tmp_path):
    """trace.save and the HTML writer kept the mode but gave the file the writer's group."""
    from groundlens_core.trace.html import write_html

    group = _other_group()
    targets = {"trace.save": tmp_path / "tr.json", "write_html": tmp_path / "r.html"}
    for target in targets.values():
        target.write_text("old\n")
        target.chmod(0o640)
        if group is not None:
            os.chown(target, -1, group)
    trace = _trace()
    trace.save(targets["trace.save"])
    write_html(trace, targets["write_html"])
    for how, target in targets.items():
        st = target.stat()
        assert st.st_mode & 0o777 == 0o640, how
        if group is not None:
            assert st.st_gid == group, how
        assert target.read_text(encoding="utf-8") != "old\n"


# ---------------------------------------------------------------- malformed traces


def _step(**change) -> dict:
    step = _trace().steps[0].to_dict()
    step.update(change)
    return step


def _trace_dict(**change) -> dict:
    data = _trace().to_dict()
    data.update(change)
    return data


MALFORMED = {
    "10k-deep JSON": ("[" * 10_000 + "]" * 10_000, "nested too deeply"),
    "question 12345": (json.dumps(_trace_dict(steps=[_step(question=12345)])), "question must be text"),
    "context a string": (json.dumps(_trace_dict(steps=[_step(context="str")])), "context must be a list"),
    "usage a string": (json.dumps(_trace_dict(steps=[_step(usage="str")])), "usage must be an object"),
    "a null step": (json.dumps(_trace_dict(steps=[None])), "a step must be a JSON object, got null"),
    "a null trace": (json.dumps([None]), "a trace must be a JSON object, got null"),
    "no id": (json.dumps({k: v for k, v in _trace_dict().items() if k != "id"}), "has no 'id' field"),
    "metadata a list": (json.dumps(_trace_dict(metadata=[1])), "metadata must be an object"),
    "steps an object": (json.dumps(_trace_dict(steps={})), "steps must be a list, got an object"),
    "steps null": (json.dumps(_trace_dict(steps=None)), "steps must be a list, got null"),
    "schema_version 999": (json.dumps(_trace_dict(schema_version="999")), "schema_version 999 is newer"),
    "schema_version 2.0": (json.dumps(_trace_dict(schema_version="2.0")), "schema_version 2.0 is newer"),
    "schema_version a word": (json.dumps(_trace_dict(schema_version="new")), "schema_version must be like"),
    "a 5000-digit number": (json.dumps(_trace_dict())[:-1] + ', "n": ' + "7" * 5000 + "}", "digits"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_trace_is_aone_line_error(tmp_path, capsys, case):
    """A deep JSON was a RecursionError traceback, wrong types an AttributeError traceback, and a
    null step 'missing 'NoneType' object is not subscriptable'."""
    text, expected = MALFORMED[case]
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    out = tmp_path / "r.html"
    assert main(["report", str(bad), "-o", str(out)]) == 2
    err = one_line_error(capsys)
    assert expected in err and str(bad) in err and "NoneType" not in err, err
    assert not out.exists()
    with pytest.raises(GroundlensInputError, match=expected):  # the Python API says the same, in one line
        Trace.from_dict(None) if case == "a null trace" else Trace.from_json(text)  # type: ignore[arg-type]


def test_a_directory_or_fifo_given_to_report_is_named_as_such(tmp_path, capsys):
    """Both were 'trace file not found'."""
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    for path, kind in ((tmp_path, "a directory"), (fifo, "a FIFO")):
        assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
        err = one_line_error(capsys)
        assert kind in err and "not found" not in err, err


# ---------------------------------------------------------------- redaction


def test_a_short_redacted_text_cannot_be_confirmed_by_guessing(tmp_path):
    """Redaction kept an unkeyed SHA-256: sha256('yes') in the export confirmed the guess 'yes'."""
    from groundlens_core.trace.html import render_html
    from groundlens_core.trace.otel import render_text

    trace = _trace(response="yes")
    unkeyed = hashlib.sha256(b"yes").hexdigest()
    exports = {
        "json": trace.to_json(redact=True),
        "html": render_html(trace, redact=True),
        "otel": render_text("yes", redact=True) or "",
    }
    for name, text in exports.items():
        assert unkeyed[:12] not in text, name
        assert '"yes"' not in text and ">yes<" not in text, name
    step = trace.to_dict(redact=True)["steps"][0]
    assert step["response"] == {"redacted": True, "hmac_sha256": redaction_digest("yes"), "length": 3}
    # within one process equal texts still match, and a new process has a new key
    assert redaction_digest("yes") == redaction_digest("yes")
    other = _run("from groundlens_core.trace.model import redaction_digest; print(redaction_digest('yes'))")
    assert other.returncode == 0 and other.stdout.strip() != redaction_digest("yes")


def test_a_trace_redacted_by_an_older_version_still_loads_and_validates(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from groundlens_core.trace.model import json_schema
    from groundlens_core.trace.otel import render_text

    old = _trace_dict(steps=[_step(response={"redacted": True, "sha256": "ab" * 32, "length": 9})])
    jsonschema.validate(old, json_schema())
    jsonschema.validate(_trace(response="yes").to_dict(redact=True), json_schema())
    step = Trace.from_dict(old).steps[0]
    assert plain_text(step.response) == "[redacted: 9 chars, sha256 abababababab]"
    assert render_text(step.response) == f"[redacted sha256={'ab' * 32} length=9]"


# ---------------------------------------------------------------- a run's own files beside the output


def test_own_files_are_never_opened_through_a_link_or_a_second_name(tmp_path):
    """A link that appears after a run's first checks is still not followed, and a file with a
    second name (a hard link) is never written in place."""
    from groundlens_core.batch.outputs import OutputLock, open_own

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / ".o.csv.groundlens-partial"
    link.symlink_to(victim)
    with pytest.raises(GroundlensInputError, match="symbolic link.*partial output of o.csv"):
        open_own(link, os.O_RDWR, "partial output", "o.csv")
    fd = open_own(link, os.O_WRONLY, "partial output", "o.csv", fresh=True)  # the link itself replaced
    os.write(fd, b"rows")
    os.close(fd)
    assert victim.read_text() == "precious\n" and not link.is_symlink() and link.read_bytes() == b"rows"

    lock = tmp_path / ".o.csv.groundlens-lock"
    os.link(victim, lock)
    with pytest.raises(GroundlensInputError, match="hard link to another file.*lock of o.csv"):
        OutputLock.acquire(lock, "o.csv")
    lock.unlink()
    lock.symlink_to(victim)
    with pytest.raises(GroundlensInputError, match="symbolic link.*lock of o.csv"):
        OutputLock.acquire(lock, "o.csv")
    assert victim.read_text() == "precious\n"


# ---------------------------------------------------------------- inputs that are not regular files


@pytest.mark.parametrize("command", ["calibrate --pairs", "evaluate --calibration", "evaluate", "report"])
def test_a_fifo_directory_or_device_given_as_an_input_is_refused_without_hanging(tmp_path, command):
    """`calibrate --pairs fifo` opened the FIFO for reading and waited for a writer for good."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    pairs = str(_pairs(tmp_path / "pairs.csv"))
    for source, kind in ((fifo, "FIFO"), (tmp_path, "directory"), (Path(os.devnull), "device")):
        args = {
            "calibrate --pairs": ["calibrate", "--pairs", str(source), "-o", str(tmp_path / "c.json")],
            "evaluate --calibration": ["evaluate", pairs, "-o", str(tmp_path / "o.csv"), "--calibration", str(source)],
            "evaluate": ["evaluate", str(source), "-o", str(tmp_path / "o.csv")],
            "report": ["report", str(source), "-o", str(tmp_path / "r.html")],
        }[command]
        try:
            proc = _run(_cli_code(*args), timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} {source} hung")
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and kind in lines[0] and str(source) in lines[0], proc.stderr
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "o.csv").exists()


# ---------------------------------------------------------------- an HTML report over another file


@pytest.mark.parametrize("command", ["evaluate --html", "report -o"])
def test_a_report_never_replaces_an_existing_file_that_is_not_html(tmp_path, capsys, command):
    """`--html keys/groundlens-signing.key` replaced a private key with HTML and exited 0."""
    key = tmp_path / "keys" / "groundlens-signing.key"
    key.parent.mkdir()
    key.write_bytes(b"secret key bytes")
    src = _pairs(tmp_path / "pairs.csv")
    _trace(tmp_path / "tr.json")

    def run(target: Path) -> int:
        if command == "evaluate --html":
            return main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--html", str(target)])
        return main(["report", str(tmp_path / "tr.json"), "-o", str(target)])

    assert run(key) == 2
    err = one_line_error(capsys)
    assert str(key) in err and "not an .html file" in err, err
    assert key.read_bytes() == b"secret key bytes" and not (tmp_path / "o.csv").exists()
    for name in ("new-name.key", "old.HTM", "old.html"):  # a new file of any name; an existing .html/.htm
        target = tmp_path / name
        if name.startswith("old"):
            target.write_text("<p>old report</p>")
        assert run(target) == 0, capsys.readouterr().err
        assert "<html" in target.read_text(encoding="utf-8").lower()
