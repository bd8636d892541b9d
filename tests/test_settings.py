"""Environment settings: a bad value is one warning line and the default, never a crash at import,
and never a limit of 0 or -1 taken silently."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from groundlens_core import settings
from groundlens_core.errors import GroundlensInputError

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=dict(os.environ, **env), capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_a_bad_text_limit_does_not_break_the_cli():
    exe = shutil.which("groundlens", path=str(Path(sys.executable).parent))
    assert exe, "the groundlens console script is not installed next to this Python"
    done = _run([exe, "--version"], GROUNDLENS_MAX_CHARS="abc")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("groundlens-core ")
    assert done.stderr.splitlines() == [
        "groundlens: GROUNDLENS_MAX_CHARS='abc' is not a whole number of at least 1; using 200000"
    ]


@pytest.mark.parametrize("value", ["-1", "0", "12.5", "lots", "nan"])
def test_a_limit_that_is_not_a_positive_whole_number_is_refused(value):
    done = _run([sys.executable, "-c", "import groundlens_core.scoring as s; print(s.MAX_TEXT_CHARS)"],
                GROUNDLENS_MAX_CHARS=value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200000"]
    assert len(done.stderr.splitlines()) == 1 and f"GROUNDLENS_MAX_CHARS={value!r}" in done.stderr


def test_a_good_text_limit_applies():
    code = (
        "from groundlens_core.scoring import evaluate\n"
        "from groundlens_core.errors import GroundlensInputError\n"
        "try:\n"
        "    evaluate(question='q' * 40, response='fine')\n"
        "except GroundlensInputError as exc:\n"
        "    print(exc)\n"
    )
    done = _run([sys.executable, "-c", code], GROUNDLENS_MAX_CHARS="30")
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert "question has 40 characters; the limit is 30 (GROUNDLENS_MAX_CHARS)" in done.stdout


def test_readers(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="groundlens.settings")
    for value, want in (("", 7), ("  ", 7), ("12", 12), ("1_000", 1000), ("0", 7), ("-3", 7), ("x", 7)):
        monkeypatch.setenv("GROUNDLENS_TEST_N", value)
        assert settings.whole_number("GROUNDLENS_TEST_N", 7) == want, value
    monkeypatch.setenv("GROUNDLENS_TEST_N", "0")
    assert settings.whole_number("GROUNDLENS_TEST_N", 7, minimum=0) == 0
    for value, want in (("2.5", 2.5), ("0", 0.0), ("-1", 3.0), ("inf", 3.0), ("nan", 3.0), ("soon", 3.0)):
        monkeypatch.setenv("GROUNDLENS_TEST_S", value)
        assert settings.seconds("GROUNDLENS_TEST_S", 3.0) == want, value
    monkeypatch.setenv("GROUNDLENS_TEST_P", "~/data")
    assert settings.path("GROUNDLENS_TEST_P") == Path.home() / "data"
    monkeypatch.delenv("GROUNDLENS_TEST_P")
    assert settings.path("GROUNDLENS_TEST_P") is None
    # one line per bad value, however often the setting is read
    monkeypatch.setenv("GROUNDLENS_TEST_N", "-5")
    caplog.clear()
    for _ in range(3):
        settings.whole_number("GROUNDLENS_TEST_N", 7)
    assert [r.getMessage() for r in caplog.records] == [
        "groundlens: GROUNDLENS_TEST_N='-5' is not a whole number of at least 1; using 7"
    ]


def test_an_unknown_backend_is_a_one_line_error_naming_the_variable(monkeypatch):
    from groundlens_core.embedding import default_backend

    monkeypatch.setenv("GROUNDLENS_BACKEND", " packed-torch ")
    assert default_backend() == "packed-torch"
    monkeypatch.setenv("GROUNDLENS_BACKEND", "packd-torch")
    with pytest.raises(GroundlensInputError, match=r"unknown embedding backend 'packd-torch' \(from GROUNDLENS_BACKEND\)"):
        default_backend()


def test_a_bad_thread_count_warns_and_runs_on_one_thread(monkeypatch, caplog):
    from groundlens_core.batch.threads import default_threads

    caplog.set_level(logging.WARNING, logger="groundlens.settings")
    monkeypatch.setenv("GROUNDLENS_THREADS", "0")
    assert default_threads() == 1
    assert "GROUNDLENS_THREADS='0' is not a whole number of at least 1" in caplog.text
    monkeypatch.setenv("GROUNDLENS_THREADS", "3")
    assert default_threads() == 3
