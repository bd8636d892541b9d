"""The one split of the HaluEval sets (in ``$GROUNDLENS_SHARED_DATA``) that every script uses.

``halueval_general.csv``: a row is in the *fit* part when the first byte of sha256(id) is below 179
(about 70 %), else *held out*. The bundled DGI direction is fitted on the grounded rows of the fit
part only; every DGI figure we print is measured on the held-out part (both labels).
"""

from __future__ import annotations

import csv
import hashlib
import os
import sys
from pathlib import Path


def shared_data() -> Path:
    """The benchmark data folder ``GROUNDLENS_SHARED_DATA`` names; without it the script stops, saying so."""
    value = os.environ.get("GROUNDLENS_SHARED_DATA", "").strip()
    if not value:
        print("skipped: set GROUNDLENS_SHARED_DATA to the folder holding the benchmark data (halueval_qa.csv, ...)")
        sys.exit(0)
    return Path(value).expanduser()


SHARED = shared_data()
FIT_CUTOFF = 179  # of 256


def in_fit(row_id: str) -> bool:
    return hashlib.sha256(row_id.encode("utf-8")).digest()[0] < FIT_CUTOFF


def read_rows(name: str) -> list[dict[str, str]]:
    with open(SHARED / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
