"""The ledger's own edges, through the real ``groundlens`` command: a ledger that is one of the
run's own files, a last line that is not this key's record, another key, checks that come after
the work, and ``verify`` while a writer appends. Each refusal is one line, before the model loads,
with nothing written and nothing lost."""

from __future__ import annotations

import csv
import json
import os
import threading
from pathlib import Path

import pytest
from cli_io import one_line_error

from groundlens_core.cli import main
from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger import Ledger, canonical_bytes, decision_record, verify_ledger, write_keypair


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """(private, public) of the ledger's key, and (private, public) of another signer."""
    base = tmp_path_factory.mktemp("keys")
    mine, other = write_keypair(base / "mine"), write_keypair(base / "other")
    return mine[0], mine[1], other[0], other[1]


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the run gets as far as loading the model: every check comes before it."""
    import groundlens_core.scoring as scoring

    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(scoring, "get_default_embedder", loaded)


def _bodies(n: int, tag: str = "r") -> list[dict]:
    return [
        decision_record(method="sgi", band="trusted", question=f"q{i}", response=f"{tag}{i}", step_id=f"{tag}-{i}")
        for i in range(n)
    ]


def _input(tmp_path: Path, kind: str = "csv") -> Path:
    rows = [{"question": f"What is item {i}?", "response": f"Item {i} is a red box.",
             "context": f"Item {i} is a red box made of wood.", "node": "answer"} for i in range(20)]
    path = tmp_path / f"s.{kind}"
    if kind == "csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry of ``folder`` (not the key folders) and its bytes, or its link target."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.iterdir()):
        out[p.name] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


# ---------------------------------------------------------------- a ledger that is one of the run's own files

OWN_FILES = {
    "partial output": ".o.{kind}.groundlens-partial",
    "row keys": ".o.{kind}.groundlens-partial.keys",
    "checkpoint": ".o.{kind}.groundlens-partial.json",
    "lock": ".o.{kind}.groundlens-lock",
}


@pytest.mark.timeout(60)  # the lock file as the ledger waited in flock for good
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
@pytest.mark.parametrize("role", list(OWN_FILES))
def test_a_file_the_run_keeps_beside_its_output_is_refused_as_its_ledger(tmp_path, keys, capsys, no_model, kind, role):
    """The partial output as the ledger: "scored 20/20", exit 0, the output made of ledger lines and
    a record cut in half, and the ledger gone. The lock file as the ledger: a hang."""
    src = _input(tmp_path, kind)
    ledger = tmp_path / OWN_FILES[role].format(kind=kind)
    before = _snapshot(tmp_path)
    argv = ["evaluate", str(src), "-o", str(tmp_path / f"o.{kind}"), "--html", str(tmp_path / "r.html"),
            "--ledger", str(ledger), "--signing-key", str(keys[0])]
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert f"the ledger {ledger} is the" in err and "give the ledger its own file" in err, err
    assert _snapshot(tmp_path) == before  # no output, no partial files, no ledger


def test_a_link_to_the_partial_output_the_signing_key_or_the_calibration_is_refused(tmp_path, keys, capsys, no_model):
    src = _input(tmp_path)
    (tmp_path / "cal.json").write_text("{}\n")
    (tmp_path / "to-partial.jsonl").symlink_to(".o.csv.groundlens-partial")  # dangling until a run makes it
    (tmp_path / "to-key.jsonl").symlink_to(keys[0])
    key_before = Path(keys[0]).read_bytes()
    cases = [(tmp_path / "to-partial.jsonl", "is a symbolic link to .o.csv.groundlens-partial, which does not exist"),
             (tmp_path / "to-key.jsonl", f"is the signing key {keys[0]}"), (Path(keys[0]), "is the signing key"),
             (tmp_path / "cal.json", "is the calibration file")]
    for ledger, name in cases:
        before = _snapshot(tmp_path)
        argv = ["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--calibration", str(tmp_path / "cal.json"),
                "--ledger", str(ledger), "--signing-key", str(keys[0])]
        assert main(argv) == 2
        err = one_line_error(capsys)
        assert name in err, err
        assert _snapshot(tmp_path) == before
    assert Path(keys[0]).read_bytes() == key_before


def test_a_dangling_symlink_as_the_ledger_is_refused_before_scoring(tmp_path, keys, capsys, no_model):
    src = _input(tmp_path)
    (tmp_path / "dl.jsonl").symlink_to(tmp_path / "nowhere" / "x.jsonl")
    before = _snapshot(tmp_path)
    argv = ["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--ledger", str(tmp_path / "dl.jsonl"),
            "--signing-key", str(keys[0])]
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert "is a symbolic link to" in err and "does not exist" in err, err
    assert _snapshot(tmp_path) == before and not (tmp_path / "nowhere").exists()
    with pytest.raises(GroundlensInputError, match="symbolic link"):  # the recorder's way in: at construction
        Ledger(tmp_path / "dl.jsonl", keys[0])


# ---------------------------------------------------------------- the last line: this key's record, or nothing


def _ledger(path: Path, key: Path, n: int = 4) -> bytes:
    Ledger(path, key).append(_bodies(n))
    return path.read_bytes()


def _unsigned_copy(data: bytes, drop_sig: bool) -> bytes:
    rec = json.loads(data.split(b"\n")[-2])
    rec["band"] = "flagged" if rec["band"] == "trusted" else "trusted"
    if drop_sig:
        rec.pop("sig")
    return canonical_bytes(rec) + b"\n"


FOREIGN_LAST_LINES = {
    "a bare seq": lambda data: b'{"seq":1000}\n',
    "the last record, band changed, unsigned": lambda data: _unsigned_copy(data, drop_sig=True),
    "the last record, band changed, old signature": lambda data: _unsigned_copy(data, drop_sig=False),
}


@pytest.mark.parametrize("case", list(FOREIGN_LAST_LINES))
def test_a_last_line_this_key_did_not_sign_is_never_continued(tmp_path, keys, capsys, no_model, case):
    """After ``echo '{"seq":1000}' >> L.jsonl`` the next run signed 20 records chained to it, exit 0,
    and verify then failed them all."""
    src, ledger = _input(tmp_path), tmp_path / "L.jsonl"
    data = _ledger(ledger, keys[0])
    ledger.write_bytes(data + FOREIGN_LAST_LINES[case](data))
    before = _snapshot(tmp_path)
    argv = ["evaluate", str(src), "-o", str(tmp_path / "b.csv"), "--ledger", str(ledger), "--signing-key", str(keys[0])]
    assert main(argv) == 2
    err = one_line_error(capsys)
    expected = "is not a groundlens record" if case == "a bare seq" else "is not a record this key signed"
    assert f"the ledger {ledger} line 5 {expected}" in err and "nothing was appended" in err, err
    assert _snapshot(tmp_path) == before
    with pytest.raises(GroundlensInputError, match="line 5"):  # the recorder's writer refuses it too
        Ledger(ledger, keys[0]).append(_bodies(1, "late"))
    assert ledger.read_bytes() == before["L.jsonl"]


def test_a_ledger_another_key_signs_is_refused_naming_both_keys(tmp_path, keys, capsys, no_model):
    """Another key on an existing ledger was accepted silently; the ledger then verified with neither key."""
    src, ledger = _input(tmp_path), tmp_path / "M.jsonl"
    _ledger(ledger, keys[0])
    before = _snapshot(tmp_path)
    argv = ["evaluate", str(src), "-o", str(tmp_path / "d.csv"), "--ledger", str(ledger), "--signing-key", str(keys[2])]
    assert main(argv) == 2
    err = one_line_error(capsys)
    mine, other = Ledger(ledger, keys[0]).writer.key.key_id, Ledger(ledger, keys[2]).writer.key.key_id
    assert f"line 4 is signed by key {mine[:16]}…, not by this signing key {other[:16]}…" in err, err
    assert _snapshot(tmp_path) == before
    with pytest.raises(GroundlensInputError, match="signed by key"):
        Ledger(ledger, keys[2]).append(_bodies(1, "other"))
    assert ledger.read_bytes() == before["M.jsonl"]
    assert verify_ledger(ledger, keys[1]).ok  # still one chain of one key


def test_a_recorder_on_a_ledger_another_key_signs_fails_at_construction(tmp_path, keys):
    """At the recorder the refusal came only on its worker, as 'records not written' warnings."""
    from groundlens_core.trace import Recorder

    ledger = tmp_path / "L.jsonl"
    data = _ledger(ledger, keys[0])
    with pytest.raises(GroundlensInputError, match="is signed by key"):
        Recorder("agent", ledger=Ledger(ledger, keys[2]))
    with open(ledger, "ab") as fh:
        fh.write(b'{"seq":1000}\n')
    with pytest.raises(GroundlensInputError, match="line 5 is not a groundlens record"):
        Recorder("agent", ledger=Ledger(ledger, keys[0]))
    assert ledger.read_bytes() == data + b'{"seq":1000}\n'


def test_the_ledgers_own_key_still_continues_it(tmp_path, keys):
    ledger = tmp_path / "L.jsonl"
    _ledger(ledger, keys[0])
    Ledger(ledger, keys[0]).append(_bodies(3, "more"))
    v = verify_ledger(ledger, keys[1])
    assert v.ok and v.records == 7


# ---------------------------------------------------------------- checks before the work


def test_group_by_a_missing_column_is_refused_before_scoring_and_leaves_nothing(tmp_path, capsys, no_model):
    """It failed only after scoring every row, leaving partial files that asked the next run for --resume."""
    src = _input(tmp_path)
    before = _snapshot(tmp_path)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "i.csv"), "--html", str(tmp_path / "g.html"),
                 "--group-by", "nope"]) == 2
    err = one_line_error(capsys)
    assert f"--group-by nope: {src} has no such column" in err, err
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------- verify while a writer appends


def test_verify_while_a_writer_is_in_the_middle_of_a_batch_waits_for_the_whole_batch(tmp_path, keys, capsys):
    """verify read without the writers' lock, so it read half a batch and said 'cut short' of an
    intact ledger. Here a writer is stopped half-way through a batch, holding the lock as
    LedgerWriter.append holds it; verify must wait and then see the whole batch."""
    import fcntl

    whole = tmp_path / "whole.jsonl"
    lines = _ledger(whole, keys[0], n=6).split(b"\n")[:-1]
    ledger = tmp_path / "L.jsonl"
    ledger.write_bytes(b"".join(line + b"\n" for line in lines[:2]))
    batch = b"".join(line + b"\n" for line in lines[2:])
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND)
    verdicts: list = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, batch[: len(batch) // 2 + 7])  # half a batch, the last line cut
        reader = threading.Thread(target=lambda: verdicts.append(main(["verify", str(ledger), "--public-key", str(keys[1])])))
        reader.start()
        reader.join(timeout=1.0)
        assert reader.is_alive() and not verdicts, "verify read the ledger in the middle of a writer's batch"
        os.write(fd, batch[len(batch) // 2 + 7 :])
    finally:
        os.close(fd)  # lets go of the lock
    reader.join(timeout=60)
    assert verdicts == [0]
    assert "6 records, chain intact" in capsys.readouterr().out
