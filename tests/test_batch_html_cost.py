"""``evaluate --html`` scores each row once: the report's details come from the results the run kept
of the riskiest rows, in the same order the report ranks by, and the page is byte for byte the one
scoring its rows a second time gives. A resumed run scores again only the shown rows an earlier
process scored."""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from cli_io import interrupt, write_csv

import groundlens_core.batch.chunks as chunks
import groundlens_core.batch.evaluate_job as evaluate_job
from groundlens_core.batch.columns import risk_key
from groundlens_core.batch.final_output import risk_order
from groundlens_core.batch.partial_output import KEY_DTYPE
from groundlens_core.batch.riskiest import RiskiestKeeper
from groundlens_core.cli import main
from groundlens_core.stream import EvaluateJob

DATA = Path(__file__).resolve().parents[1] / "groundlens_core" / "data" / "halueval_qa.csv"


def _rows(n: int) -> list[dict]:
    """``n`` bundled rows (a quarter without a context), one with a blank response: an error row."""
    with open(DATA, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    out = [
        {"id": r["id"], "question": r["question"], "context": r["context"] if i % 4 else "", "response": r["response"]}
        for i, r in enumerate(rows)
    ]
    out[5]["response"] = ""
    return out


class _FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


@pytest.fixture
def fixed_page(monkeypatch):
    """The page's only moving parts (its trace id, start time and the time it was made) held still,
    so two reports of the same rows are the same bytes with nothing masked."""
    import groundlens_core.trace.html as html
    import groundlens_core.trace.html.batch_trace as batch_trace

    monkeypatch.setattr(batch_trace, "new_id", lambda: "0" * 32)
    monkeypatch.setattr(batch_trace, "utc_now", lambda: "2026-01-02T03:04:05.000000Z")
    monkeypatch.setattr(html, "datetime", _FixedClock)


@pytest.fixture
def scored(monkeypatch):
    """The texts of every row scored, in order, through the one seam every scoring path takes."""
    score_chunk, seen = chunks.score_chunk, []

    def counting(items, *args, **kwargs):
        seen.extend(it["response"] for it in items)
        return score_chunk(items, *args, **kwargs)

    monkeypatch.setattr(chunks, "score_chunk", counting)
    return seen


def _shown(output: Path, n: int) -> list[int]:
    """The rows the report shows, ranked from the written cells alone."""
    with open(output, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return sorted(range(len(rows)), key=lambda i: (*risk_key(rows[i]), i))[:n]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_kept_results_give_the_bytes_of_a_report_that_scores_its_rows_again(
    tmp_path, capsys, monkeypatch, fixed_page, scored, fmt
):
    rows = _rows(40)
    src = write_csv(tmp_path / "in.csv", rows)
    argv = ["evaluate", str(src), "--batch-size", "8", "--html-rows", "12"]
    kept, again = tmp_path / "kept.html", tmp_path / "again.html"
    assert main([*argv, "-o", str(tmp_path / f"a.{fmt}"), "--html", str(kept)]) == 0
    assert sorted(scored) == sorted(r["response"] for r in rows)  # each row once (the blank one: an error)
    scored.clear()
    monkeypatch.setattr(evaluate_job, "riskiest_keeper", lambda job: None)  # the report scores its rows
    assert main([*argv, "-o", str(tmp_path / f"b.{fmt}"), "--html", str(again)]) == 0
    assert len(scored) == len(rows) + 11  # every row, then the 11 shown rows that are not the error
    assert kept.read_bytes() == again.read_bytes()
    assert (tmp_path / f"a.{fmt}").read_bytes() == (tmp_path / f"b.{fmt}").read_bytes()


def test_a_resumed_run_scores_again_only_the_shown_rows_scored_before_it(tmp_path, capsys, monkeypatch, fixed_page):
    rows = _rows(48)
    src = write_csv(tmp_path / "in.csv", rows)
    argv = ["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--batch-size", "8", "--html-rows", "15"]
    ref = tmp_path / "ref.html"
    assert (
        main(
            [
                "evaluate",
                str(src),
                "-o",
                str(tmp_path / "ref.csv"),
                "--batch-size",
                "8",
                "--html-rows",
                "15",
                "--html",
                str(ref),
            ]
        )
        == 0
    )
    interrupt(monkeypatch, [*argv, "--html", str(tmp_path / "r.html")], chunks=3)  # rows 0-23 written
    score_chunk, seen = chunks.score_chunk, []
    monkeypatch.setattr(chunks, "score_chunk", lambda items, *a, **k: seen.append(items) or score_chunk(items, *a, **k))
    assert main([*argv, "--html", str(tmp_path / "r.html"), "--resume"]) == 0
    by_response = {r["response"]: i for i, r in enumerate(rows)}
    run, report = seen[:3], seen[3:]  # the three chunks after row 24, then the report's pass
    assert sorted(by_response[it["response"]] for part in run for it in part) == list(range(24, 48))
    earlier = sorted(i for i in _shown(tmp_path / "o.csv", 15) if i < 24 and rows[i]["response"])
    assert earlier and len(earlier) < 15  # the report needed some rows of each process
    assert sorted(by_response[it["response"]] for part in report for it in part) == earlier
    assert (tmp_path / "r.html").read_bytes() == ref.read_bytes()


def _random_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    """Keys with many ties (few bands, few scores) and a NaN score now and then."""
    keys = np.zeros(n, KEY_DTYPE)
    keys["band"] = rng.integers(0, 4, n)
    keys["norm"] = rng.choice([0.1, 0.25, 0.5, 2.0, np.nan], n)
    return keys


def _cells(key) -> dict:
    """Written cells whose key file record is ``key`` (band by its order, score as the normalized value)."""
    from groundlens_core.batch.columns import BAND_ORDER

    band = {r: b for b, r in BAND_ORDER.items()}[int(key["band"])]
    score = float(key["norm"])
    return {"groundlens_triage": band, "groundlens_method": "sgi", "groundlens_score": None if score == 2.0 else score}


@pytest.mark.parametrize("seed", range(5))
def test_the_keeper_keeps_exactly_the_rows_risk_order_ranks_first(seed):
    from types import SimpleNamespace

    from groundlens_core.batch.partial_output import row_keys

    rng = np.random.default_rng(seed)
    limit, n = int(rng.integers(1, 40)), int(rng.integers(0, 300))
    keys = row_keys([_cells(k) for k in _random_keys(rng, n)])  # as the keys file records them
    keeper = RiskiestKeeper(limit)
    start = 0
    while start < n:
        size = int(rng.integers(1, 50))
        part = keys[start : start + size]
        items = [{"response": f"r{start + k}"} for k in range(len(part))]
        results = [SimpleNamespace(method="sgi", row=start + k) for k in range(len(part))]
        keeper.offer(start, part, items, results)
        assert len(keeper) <= limit  # never more results held than the report shows
        start += len(part)
    expected = risk_order(keys)[:limit].tolist()
    got = [i for i in range(n) if keeper.result_for(i, {"response": f"r{i}"}) is not None]
    assert got == sorted(expected)
    assert all(keeper.result_for(i, {"response": f"r{i}"}).row == i for i in expected)
    if expected:
        assert keeper.result_for(expected[0], {"response": "another text"}) is None  # read back otherwise


def test_no_keeper_without_a_report_or_for_ray(tmp_path):
    job = EvaluateJob(input=tmp_path / "in.csv", output=tmp_path / "o.csv")
    assert evaluate_job.riskiest_keeper(job) is None
    html = tmp_path / "r.html"
    assert evaluate_job.riskiest_keeper(EvaluateJob(input=job.input, output=job.output, html=html, html_rows=0)) is None
    assert (
        evaluate_job.riskiest_keeper(EvaluateJob(input=job.input, output=job.output, html=html, engine="ray")) is None
    )
    assert evaluate_job.riskiest_keeper(EvaluateJob(input=job.input, output=job.output, html=html)) is not None
