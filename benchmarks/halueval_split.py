"""The one split of the shared HaluEval sets that every script uses.

``halueval_general.csv``: a row is in the *fit* part when the first byte of sha256(id) is below 179
(about 70 %), else *held out*. The bundled DGI direction is fitted on the grounded rows of the fit
part only; every DGI figure we print is measured on the held-out part (both labels).
"""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path

SHARED = Path(os.environ.get("GROUNDLENS_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
FIT_CUTOFF = 179  # of 256


def in_fit(row_id: str) -> bool:
    return hashlib.sha256(row_id.encode("utf-8")).digest()[0] < FIT_CUTOFF


def read_rows(name: str) -> list[dict[str, str]]:
    with open(SHARED / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
