"""What the command-line tests hand the CLI and read back: CSV input files, and its one-line errors."""

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
