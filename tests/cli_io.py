"""What the command-line tests hand the CLI and read back: CSV input files, its one-line errors, and a
run stopped dead part-way."""

from __future__ import annotations

import csv
from pathlib import Path


def write_csv(path: Path, rows: list[dict], columns: list[str] | None = None) -> Path:
    """``rows`` as a CSV file with a header (``columns``, else the first row's keys); returns ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns or list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def one_line_error(capsys) -> str:
    """What the command wrote to stderr, checked to be one line and no traceback."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def interrupt(monkeypatch, argv: list[str], *, chunks: int) -> None:
    """Run the CLI with ``argv`` and stop it dead (as a SIGKILL would) after ``chunks`` written chunks."""
    import pytest

    import groundlens_core.batch.partial_output as partial_output
    from groundlens_core.cli import main

    write, done = partial_output.Sink.write, []

    def killed_after(self, rows, first_row, keys=None):
        if len(done) == chunks:
            raise SystemExit(137)
        done.append(first_row)
        write(self, rows, first_row, keys)

    with monkeypatch.context() as m:
        m.setattr(partial_output.Sink, "write", killed_after)
        with pytest.raises(SystemExit):
            main(argv)
