"""The labelled pool the verifier is fitted and validated on (training and benchmarks only).

Read from the folder ``$GROUNDLENS_SHARED_DATA`` names: five sets written by others under
``train/`` (each its own origin: leave-one-file-out validation leaves one whole file out), the
project's dev sets, and pairs generated from the pool's contexts (:mod:`.edits`). A user of the
package never needs it: the shipped weights are fitted already.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

from groundlens_core import settings
from groundlens_core.errors import GroundlensInputError

#: the five sets written by others: what leave-one-file-out validation leaves out, one at a time
TRAIN_FILES = ("attrbench_train", "begin", "faithdial_audit", "hagrid", "summedits_train")
#: sets that may be fitted on (licences allow shipping weights fitted on them)
DEV_FILES = ("claims_dev", "claims_v2_dev", "halueval_qa")
#: validation only, never fitted on: CC BY-NC-SA
VALIDATION_ONLY = ("faithbench_dev",)


@dataclass(frozen=True)
class Row:
    question: str
    context: str
    response: str
    label: int
    origin: str  # the file it came from (without .csv), or "generated:<origin>"
    kind: str = ""


def data_dir() -> Path:
    folder = settings.path("GROUNDLENS_SHARED_DATA")
    if folder is None or not folder.is_dir():
        raise GroundlensInputError("GROUNDLENS_SHARED_DATA must name the folder of the labelled data sets")
    return folder


def file_path(name: str) -> Path:
    folder = data_dir()
    path = folder / "train" / f"{name}.csv" if name in TRAIN_FILES else folder / f"{name}.csv"
    if not path.is_file():
        raise GroundlensInputError(f"{path} not found")
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read(name: str) -> list[Row]:
    """Rows of one pool file, without rows whose response or context is blank."""
    csv.field_size_limit(1 << 30)
    out = []
    with file_path(name).open(encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            if not (r.get("response") or "").strip() or not (r.get("context") or "").strip():
                continue
            out.append(
                Row(
                    question=(r.get("question") or "").strip(),
                    context=r["context"],
                    response=r["response"],
                    label=int(r["label"]),
                    origin=name,
                    kind=r.get("kind") or r.get("task") or "",
                )
            )
    return out
