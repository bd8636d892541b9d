"""The distinct texts of a labelled dev CSV, shared by the embedder tests and benchmarks."""

from __future__ import annotations

import csv
import os


def unique_texts(path: str | os.PathLike[str], n_rows: int) -> list[str]:
    """Every distinct question, context and response of the first ``n_rows`` rows, in first-seen order."""
    seen: dict[str, None] = {}
    with open(path, encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            if i >= n_rows:
                break
            for col in ("question", "context", "response"):
                seen.setdefault(row[col], None)
    return list(seen)
