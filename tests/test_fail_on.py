"""``--fail-on flagged|review``: ``check`` and ``evaluate`` exit 3 when a response is at or below the
band, so a CI job fails on a flagged answer; without the option they exit 0 whatever they find."""

from __future__ import annotations

import json

import pytest
from cli_io import write_csv

from groundlens_core.cli import EXIT_FAIL_ON, main

CTX = "The Oberoi Group is a hotel company with its head office in Delhi. It was founded in 1934."
GOOD = ("Where is the Oberoi Group's head office?", "The Oberoi Group, a hotel company, has its head office in Delhi.")
WRONG = ("When was the Oberoi Group founded?", "The Oberoi Group was founded in 1954.")
POSEIDON = "Poseidon (film) . Poseidon grossed $ 181,674,817 at the worldwide box office on a budget of $ 160 million ."
WEAK = 'The film "Poseidon" grossed $181,674,817 worldwide, with a production budget of $160 million. It was a moderate success.'


def _check(question: str | None, response: str, context: str, *extra: str) -> list[str]:
    return ["check", *(["-q", question] if question else []), "-r", response, "-c", context, *extra]


@pytest.mark.parametrize(
    ("argv", "band"),
    [(_check(*GOOD, CTX), "trusted"), (_check(None, WEAK, POSEIDON), "review"), (_check(*WRONG, CTX), "flagged")],
    ids=["trusted", "review", "flagged"],
)
def test_check_exits_3_at_or_below_the_fail_on_band(argv, band, capsys):
    assert main([*argv, "--json"]) == 0  # without --fail-on: 0 whatever the band
    assert json.loads(capsys.readouterr().out)["triage"] == band
    want = {"flagged": {"flagged"}, "review": {"flagged", "review"}}
    for fail_on in ("flagged", "review"):
        code = main([*argv, "--fail-on", fail_on])
        err = capsys.readouterr().err
        if band in want[fail_on]:
            assert code == EXIT_FAIL_ON == 3
            assert err.strip() == f"groundlens: --fail-on {fail_on}: the response is {band}; exit 3"
        else:
            assert code == 0 and "--fail-on" not in err


def test_evaluate_exits_3_when_any_row_is_at_or_below_the_band_and_still_writes_the_output(tmp_path, capsys):
    rows = [
        {"id": "good", "question": GOOD[0], "response": GOOD[1], "context": CTX},
        {"id": "weak", "question": "", "response": WEAK, "context": POSEIDON},
    ]
    src = write_csv(tmp_path / "in.csv", rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "a.csv"), "--fail-on", "flagged"]) == 0
    assert "--fail-on" not in capsys.readouterr().err  # a review row is above flagged
    assert main(["evaluate", str(src), "-o", str(tmp_path / "b.csv"), "--fail-on", "review"]) == 3
    assert "groundlens: --fail-on review: 1 of 2 rows at or below review (1 review); exit 3" in capsys.readouterr().err
    assert (tmp_path / "b.csv").exists()  # the scored file is written all the same, for the job's artifacts

    bad = write_csv(
        tmp_path / "bad.csv",
        [
            *rows,
            {"id": "wrong", "question": WRONG[0], "response": WRONG[1], "context": CTX},
            {"id": "blank", "question": "", "response": "", "context": CTX},
        ],
    )
    assert main(["evaluate", str(bad), "-o", str(tmp_path / "c.csv"), "--fail-on", "flagged"]) == 3
    err = capsys.readouterr().err
    assert "--fail-on flagged: 2 of 4 rows at or below flagged (1 error, 1 flagged); exit 3" in err
    assert main(["evaluate", str(bad), "-o", str(tmp_path / "d.csv")]) == 0  # no option: 0 as before


def test_fail_on_takes_only_the_two_bands(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*_check(*GOOD, CTX), "--fail-on", "trusted"])
    assert exc.value.code == 2 and "invalid choice: 'trusted'" in capsys.readouterr().err
