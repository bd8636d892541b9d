"""calibrate(): the direction, its file format, and the refusal of another embedder's direction."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import groundlens_core as gl
from groundlens_core.scoring.calibration import direction_from_vectors

PAIRS = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare."),
    ("What is H2O?", "H2O is the chemical formula of water."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What planet is closest to the sun?", "Mercury is the planet closest to the sun."),
]


def test_calibrate_pairs_and_round_trip(tmp_path):
    cal = gl.calibrate(pairs=PAIRS, metadata={"name": "unit"})
    assert cal.n_pairs == 5 and cal.dim == 384 and len(cal.direction) == 384
    assert np.linalg.norm(cal.vector) == pytest.approx(1.0)
    assert 0.0 < cal.concentration <= 1.0
    path = cal.save(tmp_path / "cal.json")
    again = gl.CalibrationResult.load(path)
    assert again == cal
    assert json.loads(path.read_text())["format"] == "groundlens-calibration"
    # a direction fitted on these pairs scores them higher than the bundled generic one does on average
    res = gl.compute_dgi(*PAIRS[0], calibration=path)
    assert res.direction == "calibration:unit"
    assert res.value > 0.3


def test_calibrate_from_csv_uses_label_1_only(tmp_path):
    path = tmp_path / "pairs.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["question", "response", "label"])
        for q, r in PAIRS:
            w.writerow([q, r, 1])
        w.writerow(["What is the capital of France?", "Bananas are yellow.", 0])
    cal = gl.calibrate(csv_path=path)
    assert cal.n_pairs == len(PAIRS)
    assert cal.metadata["source_sha256"]


def test_concentration_is_continuous():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(50, 8))
    base = rng.normal(size=8)
    values = []
    for spread in (0.0, 0.5, 1.0, 2.0, 4.0):
        r = q + base + spread * rng.normal(size=(50, 8))
        _, conc, _ = direction_from_vectors(q, r)
        values.append(conc)
    assert values[0] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(values, values[1:]))  # more spread, less concentration, no jumps to 0


def test_direction_from_another_embedder_is_refused(tmp_path):
    cal = gl.calibrate(pairs=PAIRS)
    data = cal.to_dict()
    data["fingerprint"] = "some-other-model@sha256:" + "0" * 64
    other = gl.CalibrationResult.from_dict(data)
    with pytest.raises(gl.CalibrationMismatchError, match="re-run `groundlens calibrate`"):
        gl.compute_dgi(*PAIRS[0], calibration=other)
    # in a batch the DGI rows fail, the SGI rows are still scored
    res = gl.evaluate_batch([PAIRS[0] + ("Paris is the capital of France.",), PAIRS[1]], calibration=other)
    assert res[0].method == "sgi" and res[1].method == "error"


def test_bad_calibration_inputs(tmp_path):
    with pytest.raises(gl.GroundlensInputError):
        gl.calibrate(pairs=[("q", "r")])
    with pytest.raises(gl.GroundlensInputError):
        gl.calibrate()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(gl.GroundlensInputError, match="not valid JSON"):
        gl.CalibrationResult.load(bad)
    with pytest.raises(gl.GroundlensInputError, match="not found"):
        gl.CalibrationResult.load(tmp_path / "missing.json")


def test_bundled_direction_provenance():
    cal = gl.bundled_direction()
    meta = cal.metadata
    assert meta["licence"] == "MIT" and "HaluEval" in meta["source"]
    assert meta["fit_rows"] == cal.n_pairs and meta["held_out_rows"] > 0
    assert len(meta["source_sha256"]) == 64
    # fitted on the fp32 pass of the bundled weights; it serves the default backend (ONNX Runtime's
    # pass of the same weights, see calibration.weights_of)
    assert cal.fingerprint == gl.get_embedder(backend="packed-torch").fingerprint
    assert gl.get_embedder().fingerprint == cal.fingerprint + "+onnx"


def test_missing_values_are_not_text():
    nan = float("nan")
    pairs = PAIRS[:2] + [(None, "orphan answer"), ("Q3?", nan), ("Q4?", None)]
    assert gl.calibrate(pairs=pairs).n_pairs == 2
