"""The signed decision ledger: keys, records, tampering of every kind, concurrent writers, crash
cuts, a real LangGraph run through the recorder, and ``evaluate --ledger``."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import logging
import multiprocessing
import os
import pickle
import stat
import threading
from pathlib import Path

import pytest
from cli_io import interrupt

from groundlens_core.cli import main
from groundlens_core.errors import GroundlensInputError
from groundlens_core.ledger import (
    GENESIS,
    Ledger,
    LedgerWriter,
    canonical_bytes,
    decision_record,
    iter_records,
    load_signing_key,
    verify_ledger,
    write_keypair,
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """(private path, public path) of one key pair, and a second pair: another signer."""
    base = tmp_path_factory.mktemp("keys")
    mine = write_keypair(base / "mine")
    other = write_keypair(base / "other")
    return mine[0], mine[1], other[0], other[1]


def _bodies(n: int, tag: str = "r") -> list[dict]:
    return [
        decision_record(method="sgi", band="trusted", question=f"q{i}", context=[f"c{i}"], response=f"{tag}{i}",
                        step_id=f"{tag}-{i}", trace_id="t", node="answer")
        for i in range(n)
    ]


def _ledger(path: Path, key: Path, n: int = 6, tag: str = "r") -> list[bytes]:
    """A ledger of ``n`` records written in two batches; returns its lines (without newlines)."""
    led = Ledger(path, key)
    bodies = _bodies(n, tag)
    led.append(bodies[:2])
    led.append(bodies[2:])
    return path.read_bytes().split(b"\n")[:-1]


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _rid(line: bytes) -> str:
    return json.loads(line)["id"]


# ---------------------------------------------------------------- keys


def test_keygen_writes_owner_only_key_and_refuses_to_overwrite(tmp_path, capsys):
    old = os.umask(0)  # a permissive umask must not widen the private key's mode
    try:
        assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    finally:
        os.umask(old)
    private, public = tmp_path / "k" / "groundlens-signing.key", tmp_path / "k" / "groundlens-signing.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in private.read_bytes() and b"PUBLIC KEY" in public.read_bytes()
    out = capsys.readouterr().out
    before = private.read_bytes(), public.read_bytes()
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "not overwriting" in err and len(err.strip().splitlines()) == 1
    assert (private.read_bytes(), public.read_bytes()) == before
    # a public key alone in the folder is not overwritten either (nor a private key written beside it)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "groundlens-signing.pub").write_text("mine")
    assert main(["keygen", "--out", str(tmp_path / "p")]) == 2
    assert not (tmp_path / "p" / "groundlens-signing.key").exists()
    assert _secret_forms(private).isdisjoint(_words(out))


def _secret_forms(private: Path) -> set[str]:
    """The private key as it could leak: the PEM body, its base64 lines, the raw 32 bytes in hex and base64."""
    from cryptography.hazmat.primitives import serialization

    pem = private.read_text()
    body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return {body, raw.hex(), base64.b64encode(raw).decode(), *[ln for ln in pem.splitlines() if not ln.startswith("-----")]}


def _words(text: str) -> set[str]:
    return set(text.split()) | {text}


def _leaks(private: Path, text: str) -> bool:
    return any(secret in text for secret in _secret_forms(private))


def test_missing_unreadable_or_malformed_key_is_one_line_error_without_the_key(tmp_path, keys, capsys):
    with pytest.raises(GroundlensInputError, match="cannot read the signing key"):
        load_signing_key(tmp_path / "nope.key")
    with pytest.raises(GroundlensInputError, match="cannot read the signing key"):
        load_signing_key(tmp_path)  # a folder: unreadable as a file
    with pytest.raises(GroundlensInputError, match="signing key file"):
        Ledger(tmp_path / "l.jsonl", None)
    # a file holding the public key, or the private key's text cut short: named, never quoted
    cut = tmp_path / "cut.key"
    cut.write_text(keys[0].read_text()[:-40])
    for bad in (keys[1], cut):
        with pytest.raises(GroundlensInputError) as exc:
            load_signing_key(bad)
        assert str(bad) in str(exc.value) and "\n" not in str(exc.value)
        assert not _leaks(keys[0], str(exc.value))
    key = load_signing_key(keys[0])
    assert not _leaks(keys[0], repr(key)) and not _leaks(keys[0], str(key))
    with pytest.raises(TypeError):
        pickle.dumps(key)


# ---------------------------------------------------------------- tampering


def test_an_untouched_ledger_verifies_and_names_its_genesis_and_head(tmp_path, keys, capsys):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0])
    recs = [json.loads(x) for x in lines]
    assert recs[0]["prev"] == GENESIS and [r["seq"] for r in recs] == list(range(6))
    for a, b in zip(lines, recs[1:]):
        assert b["prev"] == hashlib.sha256(a).hexdigest()
    assert all(canonical_bytes(r) == x for r, x in zip(recs, lines))  # lines are the canonical bytes
    v = verify_ledger(path, keys[1])
    assert v.ok and v.records == 6 and v.head == hashlib.sha256(lines[-1]).hexdigest()
    assert main(["verify", str(path), "--public-key", str(keys[1])]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "6 records, chain intact"
    assert main(["verify", str(path), "--public-key", str(keys[1]), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["ok"] is True and got["records"] == 6 and got["message"] == "6 records, chain intact"


def _changed_field(lines):
    rec = json.loads(lines[2])
    rec["band"] = "flagged"
    return lines[:2] + [canonical_bytes(rec)] + lines[3:], 3, _rid(lines[2])


def _changed_spacing(lines):
    rec = json.loads(lines[2])
    return lines[:2] + [json.dumps(rec, sort_keys=True).encode()] + lines[3:], 3, _rid(lines[2])


def _deleted_middle(lines):
    return lines[:2] + lines[3:], 3, _rid(lines[3])


def _deleted_first(lines):
    return lines[1:], 1, _rid(lines[1])


def _inserted_forged(lines):
    rec = json.loads(lines[1])
    rec.update(id="f" * 32, step_id="forged", band="trusted")
    return lines[:3] + [canonical_bytes(rec)] + lines[3:], 4, "f" * 32


def _reordered(lines):
    return lines[:2] + [lines[3], lines[2]] + lines[4:], 3, _rid(lines[3])


def _reordered_at_end(lines):
    return lines[:4] + [lines[5], lines[4]], 5, _rid(lines[5])


def _replayed(lines):
    return lines[:4] + [lines[1]] + lines[4:], 5, _rid(lines[1])


def _replayed_at_end(lines):
    return lines + [lines[-1]], 7, _rid(lines[-1])


def _cut_short(lines):
    return lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], 6, None


TAMPERING = {
    "changed": [_changed_field, _changed_spacing],
    "deleted": [_deleted_middle, _deleted_first],
    "inserted": [_inserted_forged],
    "reordered": [_reordered, _reordered_at_end],
    "replayed": [_replayed, _replayed_at_end],
}


@pytest.mark.parametrize(
    "problem,tamper", [(p, t) for p, ts in TAMPERING.items() for t in ts], ids=lambda x: getattr(x, "__name__", x)
)
def test_verify_catches_and_locates_each_tampering(tmp_path, keys, capsys, problem, tamper):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0])
    assert verify_ledger(path, keys[1]).ok
    new, line, rid = tamper(lines)
    _write(path, new)
    v = verify_ledger(path, keys[1])
    assert not v.ok and (v.problem, v.line, v.record_id) == (problem, line, rid), v.message()
    assert main(["verify", str(path), "--public-key", str(keys[1])]) == 1
    out = capsys.readouterr().out
    assert f"line {line}" in out and rid in out and problem in out
    assert main(["verify", str(path), "--public-key", str(keys[1]), "--json"]) == 1
    got = json.loads(capsys.readouterr().out)
    assert (got["ok"], got["problem"], got["line"], got["record_id"]) == (False, problem, line, rid)


def test_a_record_signed_with_the_same_key_elsewhere_is_inserted_not_accepted(tmp_path, keys):
    path, other = tmp_path / "l.jsonl", tmp_path / "other.jsonl"
    lines = _ledger(path, keys[0])
    foreign = _ledger(other, keys[0], tag="x")  # a valid record of another ledger, same key
    _write(path, lines[:3] + [foreign[3]] + lines[3:])
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.problem, v.line, v.record_id) == (False, "inserted", 4, _rid(foreign[3]))


def test_signed_by_another_key_whole_ledger_or_one_record(tmp_path, keys, capsys):
    path = tmp_path / "l.jsonl"
    _ledger(path, keys[2])  # the whole chain, rewritten by another key holder
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.problem, v.line) == (False, "other_key", 1)
    assert verify_ledger(path, keys[3]).ok
    # one record in the middle changed and signed again with another key
    mine = _ledger(tmp_path / "m.jsonl", keys[0])
    rec = json.loads(mine[2])
    rec["band"] = "trusted"
    rec.pop("sig")
    resigned = load_signing_key(keys[2])
    rec["key"] = resigned.key_id
    rec["sig"] = base64.b64encode(resigned.sign(canonical_bytes(rec))).decode()
    _write(tmp_path / "m.jsonl", mine[:2] + [canonical_bytes(rec)] + mine[3:])
    v = verify_ledger(tmp_path / "m.jsonl", keys[1])
    assert (v.ok, v.problem, v.line, v.record_id) == (False, "other_key", 3, rec["id"])
    assert main(["verify", str(tmp_path / "m.jsonl"), "--public-key", str(keys[1])]) == 1
    assert "signed by" in capsys.readouterr().out


# ---------------------------------------------------------------- crashes and concurrent writers


def test_a_cut_last_line_is_reported_and_the_next_writer_starts_a_segment_naming_it(tmp_path, keys, capsys):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0], n=4)
    piece = b'{"band":"trusted","context":'  # a writer stopped in the middle of its line
    with open(path, "ab") as fh:
        fh.write(piece)
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.problem, v.line, v.record_id) == (False, "cut_short", 5, None)
    assert main(["verify", str(path), "--public-key", str(keys[1])]) == 1
    assert "line 5" in capsys.readouterr().out
    # a whole record whose newline never made it is cut too (the append did not finish)
    # the next writer (a new process would be the same: it reads the head under the lock)
    Ledger(path, keys[0]).append(_bodies(2, "after"))
    got = path.read_bytes().split(b"\n")[:-1]
    assert got[4] == piece and len(got) == 8
    segment = json.loads(got[5])
    assert segment["type"] == "segment"
    assert segment["cut"] == {"line": 5, "bytes": len(piece), "sha256": hashlib.sha256(piece).hexdigest()}
    assert segment["prev"] == hashlib.sha256(lines[3]).hexdigest() and segment["seq"] == 4  # links past the cut
    v = verify_ledger(path, keys[1])
    assert v.ok and v.records == 7 and v.segments == 1 and v.cut_lines == (5,), v.message()
    assert "chain intact" in v.message() and "5" in v.message()
    # the cut line taken out afterwards: the segment names a line that is not there
    _write(path, got[:4] + got[5:])
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.problem, v.line) == (False, "changed", 5)


def test_a_whole_record_missing_only_its_newline_is_continued_without_a_segment(tmp_path, keys):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0], n=3)
    path.write_bytes(path.read_bytes()[:-1])
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.problem, v.line, v.record_id) == (False, "cut_short", 3, _rid(lines[2]))
    Ledger(path, keys[0]).append(_bodies(1, "next"))
    got = path.read_bytes().split(b"\n")
    assert got[:3] == lines and got[-1] == b"" and len(got) == 5  # the line ended, the chain continued from it
    v = verify_ledger(path, keys[1])
    assert v.ok and v.cut_lines == () and v.segments == 0 and v.records == 4


def _forged_last(lines):
    """The last record rewritten (amount changed) and left without its newline: what someone without the key can do."""
    rec = json.loads(lines[-1])
    rec["band"] = "trusted" if rec["band"] != "trusted" else "flagged"
    return b"".join(ln + b"\n" for ln in lines[:-1]) + canonical_bytes(rec)


@pytest.mark.parametrize("forge", ["rewritten", "foreign", "not_json_object"])
def test_a_complete_last_line_without_newline_that_does_not_verify_is_never_blessed(tmp_path, keys, capsys, forge):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0], n=3)
    if forge == "rewritten":
        data = _forged_last(lines)
    elif forge == "foreign":  # a record signed by another key, linked correctly
        foreign = load_signing_key(keys[2])
        rec = dict(_bodies(1, "x")[0], v="groundlens-ledger/1", id="f" * 32, seq=1, ts="2026-01-01T00:00:00Z",
                   prev=hashlib.sha256(lines[1]).hexdigest(), key=foreign.key_id)
        rec["sig"] = base64.b64encode(foreign.sign(canonical_bytes(rec))).decode()
        data = b"".join(ln + b"\n" for ln in lines[:2]) + canonical_bytes(rec)
    else:
        data = b"".join(ln + b"\n" for ln in lines[:2]) + b"[1, 2]"
    path.write_bytes(data)
    with pytest.raises(GroundlensInputError, match=r"line 3 has no line end") as exc:
        Ledger(path, keys[0]).append(_bodies(1, "next"))
    assert "\n" not in str(exc.value)
    assert path.read_bytes() == data  # nothing appended, no segment
    v = verify_ledger(path, keys[1])
    assert not v.ok and v.line == 3 and v.problem in ("changed", "other_key", "inserted"), v
    assert main(["verify", str(path), "--public-key", str(keys[1])]) == 1
    assert "chain intact" not in capsys.readouterr().out


def test_verify_reports_a_forged_record_an_earlier_writer_closed_as_a_crash_cut(tmp_path, keys):
    """A forged, newline-less last record that a writer closed with a signed segment record (as
    writers once did): verify does not take it for a crash's cut."""
    from groundlens_core.ledger.writer import _Head

    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0], n=3)
    forged = _forged_last(lines).split(b"\n")[-1]
    writer = LedgerWriter(path, load_signing_key(keys[0]))
    writer._head = _Head(hash=hashlib.sha256(lines[1]).hexdigest(), seq=1)
    cut = {"line": 3, "bytes": len(forged), "sha256": hashlib.sha256(forged).hexdigest()}
    segment = writer._sign({"type": "segment", "cut": cut})
    _write(path, lines[:2] + [forged, canonical_bytes(segment)])
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.problem, v.line) == (False, "changed", 3), v
    # the same with a real crash's cut (a start of the record) is accepted
    piece = lines[2][:40]
    writer._head = _Head(hash=hashlib.sha256(lines[1]).hexdigest(), seq=1)
    segment = writer._sign({"type": "segment", "cut": {**cut, "bytes": 40, "sha256": hashlib.sha256(piece).hexdigest()}})
    _write(path, lines[:2] + [piece, canonical_bytes(segment)])
    v = verify_ledger(path, keys[1])
    assert v.ok and v.cut_lines == (3,), v


def _append_in_rounds(path: str, key: str, tag: str, rounds: int, per: int, gate) -> None:
    led = Ledger(path, key)
    for r in range(rounds):
        gate.wait(timeout=60)  # both writers append each round at the same moment
        led.append(_bodies(per, f"{tag}{r}-"))


def test_two_processes_appending_at_once_keep_one_valid_chain(tmp_path, keys):
    path = tmp_path / "l.jsonl"
    ctx = multiprocessing.get_context("fork")
    gate = ctx.Barrier(2)
    rounds, per = 30, 5
    procs = [ctx.Process(target=_append_in_rounds, args=(str(path), str(keys[0]), t, rounds, per, gate))
             for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    data = path.read_bytes()
    assert data.endswith(b"\n")
    v = verify_ledger(path, keys[1])
    assert v.ok and v.records == 2 * rounds * per and v.segments == 0, v.message()
    ids = [r["step_id"] for r in iter_records(path)]
    for t in ("a", "b"):  # every record of each writer is there once, in its own order
        mine = [i for i in ids if i.startswith(t)]
        assert mine == [f"{t}{r}--{i}" for r in range(rounds) for i in range(per)]


def test_a_writer_that_kept_its_head_rereads_it_after_another_wrote(tmp_path, keys):
    path = tmp_path / "l.jsonl"
    first = Ledger(path, keys[0])
    second = Ledger(path, keys[0])
    first.append(_bodies(2, "a"))
    second.append(_bodies(2, "b"))
    first.append(_bodies(2, "c"))  # its remembered head is stale now
    v = verify_ledger(path, keys[1])
    assert v.ok and v.records == 6


# ---------------------------------------------------------------- the recorder and a real LangGraph run


def test_langgraph_run_with_groundlens_ledger_appends_one_verified_record_per_scored_step(tmp_path, keys, monkeypatch, caplog):
    from langchain_core.messages import AIMessage, HumanMessage
    from test_langgraph_plugin import DOCS, KeywordRetriever, rag_graph, scripted, tool_agent_graph

    from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback
    from groundlens_core.trace.recorder.ledger import RECORDED_METHODS

    path = tmp_path / "audit" / "ledger.jsonl"
    monkeypatch.setenv("GROUNDLENS_LEDGER", str(path))
    monkeypatch.setenv("GROUNDLENS_SIGNING_KEY", str(keys[0]))
    caplog.set_level(logging.DEBUG)
    question = "How tall is the Eiffel Tower?"
    grounded = "The Eiffel Tower is 330 metres tall and stands on the Champ de Mars in Paris."
    ungrounded = "My favourite pasta recipe uses garlic, basil and plenty of parmesan cheese."
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    cb = GroundlensLangGraphCallback(name="rag", tracer_provider=provider)
    graph = rag_graph(scripted(grounded, ungrounded), KeywordRetriever(docs=DOCS))
    graph.invoke({"question": question}, config={"callbacks": [cb]})
    graph.invoke({"question": question}, config={"callbacks": [cb]})
    weather = "In Paris it is sunny and 24 degrees with a light breeze."
    agent = tool_agent_graph(scripted(
        AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call-1"}]),
        AIMessage(content=weather)))
    agent.invoke({"messages": [HumanMessage("What is the weather in Paris today?")]}, config={"callbacks": [cb]})
    traces = cb.get_traces()
    steps = [(t, s) for t in traces for s in t.steps if s.method in RECORDED_METHODS]
    assert len(steps) == 3 and len([s for t in traces for s in t.steps]) > 3  # tool steps get no record
    v = verify_ledger(path, keys[1])
    assert v.ok and v.records == 3, v.message()
    recs = list(iter_records(path))
    assert [r["step_id"] for r in recs] == [s.id for _, s in steps]
    for rec, (trace, step) in zip(recs, steps):
        assert rec["trace_id"] == trace.id and rec["node"] == step.node and rec["method"] == step.method
        assert rec["band"] == step.band and rec["scores"]["value"] == step.value
        assert rec["fingerprint"] == step.result.fingerprint and rec["version"] == step.result.version
        assert rec["sha256"]["response"] == hashlib.sha256(step.response.encode()).hexdigest()
        assert rec["sha256"]["question"] == hashlib.sha256(step.question.encode()).hexdigest()
        assert rec["sha256"]["context"] == hashlib.sha256("\n\n".join(p.text for p in step.context).encode()).hexdigest()
        assert rec["reason"] and "text" not in rec
    # the ledger keeps the decision's rule, never what the explanation quotes
    quoting = [(rec, s) for rec, (_, s) in zip(recs, steps) if '"' + s.response + '"' in s.explanation]
    assert quoting
    for rec, (_, step) in zip(recs, steps):
        assert step.explanation.startswith(f"Score {step.score:.2f}, {step.band}: {rec['reason']}")
        assert '"' not in rec["reason"] and step.response not in rec["reason"]
    text = path.read_text()
    for raw in (question, grounded, ungrounded, weather, DOCS[0].page_content, "sunny and 24 degrees Celsius"):
        assert raw not in text  # hashes only, by default
    logged = "\n".join(r.getMessage() for r in caplog.records) + json.dumps([t.to_dict() for t in traces])
    exported = spans.get_finished_spans()
    assert exported
    logged += json.dumps([{**dict(sp.attributes), "events": [dict(e.attributes) for e in sp.events]} for sp in exported],
                         default=str)
    assert not _leaks(keys[0], logged) and not _leaks(keys[0], text)


class _ThreadNotingLedger(Ledger):
    """A real ledger that also notes which thread each append ran on."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.threads: list[str] = []

    def append(self, bodies):
        self.threads.append(threading.current_thread().name)
        return super().append(bodies)


def test_recorder_signs_and_appends_on_its_worker_once_per_batch_with_text_only_when_asked(tmp_path, keys):
    from groundlens_core.trace import CallRecord, Recorder

    led = _ThreadNotingLedger(tmp_path / "l.jsonl", keys[0], include_text=True)
    rec = Recorder("test", ledger=led)
    calls = [CallRecord(trace_key="t", node="n", question=f"What is {i}?", response=f"It is {i}.",
                        context=[f"{i} is a number."]) for i in range(5)]
    calls.append(CallRecord(trace_key="t", node="n", question="q", response="r", error="the model timed out"))
    calls.append(CallRecord(trace_key="t", node="tool", kind="tool", response="a tool result"))
    for c in calls:
        rec.record(c)
    trace = rec.get_trace("t")
    assert led.threads and threading.current_thread().name not in led.threads
    assert set(led.threads) == {rec._worker.thread.name} and len(led.threads) < 6  # per batch, not per step
    recs = list(iter_records(tmp_path / "l.jsonl"))
    assert [r["step_id"] for r in recs] == [s.id for s in trace.steps if s.kind != "tool"]
    assert recs[-1]["band"] == "error" and recs[-1]["reason"] == "the model timed out"
    assert recs[0]["text"] == {"question": "What is 0?", "context": "0 is a number.", "response": "It is 0."}
    assert verify_ledger(tmp_path / "l.jsonl", keys[1]).records == 6


def test_recorder_with_ledger_but_no_key_fails_before_anything_is_scored(tmp_path, monkeypatch):
    from groundlens_core.trace import Recorder

    monkeypatch.setenv("GROUNDLENS_LEDGER", str(tmp_path / "l.jsonl"))
    monkeypatch.delenv("GROUNDLENS_SIGNING_KEY", raising=False)
    with pytest.raises(GroundlensInputError, match="GROUNDLENS_SIGNING_KEY"):
        Recorder("test")
    monkeypatch.setenv("GROUNDLENS_SIGNING_KEY", str(tmp_path / "missing.key"))
    with pytest.raises(GroundlensInputError, match="missing.key"):
        Recorder("test")
    assert Recorder("test", ledger=False)._listeners == []  # off for this recorder


# ---------------------------------------------------------------- evaluate --ledger


def _rows_csv(path: Path) -> list[dict]:
    rows = [
        {"question": "Where is the Oberoi Group's head office?", "response": "Its head office is in Delhi.",
         "context": "The Oberoi Group is a hotel company with its head office in Delhi."},
        {"question": "What is the capital of France?", "response": "The capital of France is Paris.", "context": ""},
        {"question": "Who wrote it?", "response": "", "context": "A secret ledger context sentence."},
    ]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["question", "response", "context"])
        w.writeheader()
        w.writerows(rows)
    return rows


def test_evaluate_ledger_writes_one_signed_record_per_row_including_errors(tmp_path, keys, capsys):
    rows = _rows_csv(tmp_path / "in.csv")
    ledger = tmp_path / "ledger.jsonl"
    argv = ["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--ledger", str(ledger),
            "--signing-key", str(keys[0]), "--batch-size", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    out = list(csv.DictReader(open(tmp_path / "out.csv", encoding="utf-8")))
    recs = list(iter_records(ledger))
    assert [r["row"] for r in recs] == [0, 1, 2]
    assert [r["method"] for r in recs] == [o["groundlens_method"] for o in out] == ["sgi", "dgi", "error"]
    assert [r["band"] for r in recs] == [o["groundlens_triage"] for o in out]
    assert recs[2]["reason"] == "error" and out[2]["groundlens_error"]  # the message stays out of the ledger
    assert len({r["trace_id"] for r in recs}) == 1 and all(r["fingerprint"] for r in recs)
    assert recs[0]["sha256"]["context"] == hashlib.sha256(rows[0]["context"].encode()).hexdigest()
    assert recs[1]["sha256"]["context"] is None  # an empty context cell: no context
    text = ledger.read_text()
    for r in rows:
        for v in r.values():
            if v:
                assert v not in text
    v = verify_ledger(ledger, keys[1])
    assert v.ok and v.records == 3
    assert not _leaks(keys[0], printed.out + printed.err + text)
    # a second run appends to the same chain; --ledger-text keeps the texts on request
    assert main(argv[:3] + [str(tmp_path / "out2.csv")] + argv[4:] + ["--ledger-text"]) == 0
    recs = list(iter_records(ledger))
    assert len(recs) == 6 and recs[3]["text"]["response"] == rows[0]["response"]
    assert recs[5]["reason"] == out[2]["groundlens_error"]  # with --ledger-text: the error's message too
    assert verify_ledger(ledger, keys[1]).records == 6


def test_evaluate_ledger_with_a_bad_key_stops_before_scoring(tmp_path, keys, capsys):
    _rows_csv(tmp_path / "in.csv")
    base = ["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--ledger", str(tmp_path / "l.jsonl")]
    for extra, expected in ((["--signing-key", str(tmp_path / "none.key")], "none.key"),
                            (["--signing-key", str(keys[1])], "not an Ed25519 private key")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1 and not _leaks(keys[0], err)
        assert not (tmp_path / "out.csv").exists() and not (tmp_path / "l.jsonl").exists()
    assert main(["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--signing-key", str(keys[0])]) == 2
    assert "go with --ledger" in capsys.readouterr().err


def test_verify_missing_ledger_or_bad_public_key_is_a_one_line_error(tmp_path, keys, capsys):
    assert main(["verify", str(tmp_path / "none.jsonl"), "--public-key", str(keys[1])]) == 2
    assert "ledger not found" in capsys.readouterr().err
    _ledger(tmp_path / "l.jsonl", keys[0], n=1)
    assert main(["verify", str(tmp_path / "l.jsonl"), "--public-key", str(keys[0])]) == 2
    err = capsys.readouterr().err
    assert "not an Ed25519 public key" in err and not _leaks(keys[0], err)


def test_writer_refuses_a_ledger_whose_last_whole_line_is_not_a_record(tmp_path, keys):
    path = tmp_path / "l.jsonl"
    path.write_text("not a record\n")
    with pytest.raises(GroundlensInputError, match="groundlens verify"):
        LedgerWriter(path, load_signing_key(keys[0])).append(_bodies(1))
    assert path.read_text() == "not a record\n"


def test_a_kept_head_catches_records_cut_off_the_end_and_a_rewritten_chain(tmp_path, keys, capsys):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0])
    head = verify_ledger(path, keys[1]).head
    Ledger(path, keys[0]).append(_bodies(2, "later"))  # the ledger grows: the kept head is still in it
    assert verify_ledger(path, keys[1], head=head).ok
    _write(path, lines[:4])  # whole records cut off the end: a shorter chain that verifies on its own
    assert verify_ledger(path, keys[1]).ok
    v = verify_ledger(path, keys[1], head=head)
    assert (v.ok, v.problem, v.line) == (False, "deleted", None) and head[:16] in v.message()
    assert main(["verify", str(path), "--public-key", str(keys[1]), "--head", head]) == 1
    assert "kept earlier is not in the ledger" in capsys.readouterr().out
    path.unlink()
    _ledger(path, keys[0])  # the whole chain written again by the key holder
    assert verify_ledger(path, keys[1]).ok and not verify_ledger(path, keys[1], head=head).ok


def _append_once(path: str, led: Ledger) -> None:
    led.append(_bodies(2, "child"))


def test_a_child_forked_while_the_parent_appends_can_append_too(tmp_path, keys):
    import fcntl

    path = tmp_path / "l.jsonl"
    led = Ledger(path, keys[0])
    led.append(_bodies(1, "first"))
    blocker = os.open(path, os.O_RDONLY)
    fcntl.flock(blocker, fcntl.LOCK_EX)  # the parent's next append waits for the file lock, holding its own
    parent = threading.Thread(target=led.append, args=(_bodies(2, "parent"),))
    parent.start()
    for _ in range(10_000):  # bounded: until the parent's append holds the writer's lock
        if led.writer._lock.locked():
            break
        threading.Event().wait(0.001)
    assert led.writer._lock.locked()
    child = multiprocessing.get_context("fork").Process(target=_append_once, args=(str(path), led))
    child.start()
    fcntl.flock(blocker, fcntl.LOCK_UN)
    os.close(blocker)
    parent.join(timeout=60)
    child.join(timeout=60)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0
    v = verify_ledger(path, keys[1])
    assert v.ok and v.records == 5, v.message()
    assert sorted(r["step_id"][:5] for r in iter_records(path)) == ["child", "child", "first", "paren", "paren"]


# ---------------------------------------------------------------- key material given instead of a path


def test_key_text_given_instead_of_a_path_is_refused_without_being_shown(tmp_path, keys, capsys, monkeypatch):
    from groundlens_core.trace import Recorder

    _rows_csv(tmp_path / "in.csv")
    pem = keys[0].read_text()
    body_line = next(ln for ln in pem.splitlines() if not ln.startswith("-----"))
    base = ["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--ledger", str(tmp_path / "l.jsonl")]
    for given in (pem, pem.strip(), body_line):
        assert main(base + ["--signing-key", given]) == 2
        err = capsys.readouterr().err
        assert "must be a path to a key file" in err and len(err.strip().splitlines()) == 1
        assert not _leaks(keys[0], err) and "BEGIN" not in err
    monkeypatch.setenv("GROUNDLENS_LEDGER", str(tmp_path / "l.jsonl"))
    monkeypatch.setenv("GROUNDLENS_SIGNING_KEY", pem)
    with pytest.raises(GroundlensInputError) as exc:
        Recorder("test")
    assert "a PEM text was given" in str(exc.value) and not _leaks(keys[0], str(exc.value))
    _ledger(tmp_path / "v.jsonl", keys[0], n=1)
    assert main(["verify", str(tmp_path / "v.jsonl"), "--public-key", keys[1].read_text()]) == 2
    err = capsys.readouterr().err
    assert "the public key must be a path to a key file (a PEM text was given" in err and "BEGIN" not in err


def test_evaluate_refuses_a_ledger_that_is_the_input_output_or_report(tmp_path, keys, capsys):
    _rows_csv(tmp_path / "in.csv")
    inp, out, html = tmp_path / "in.csv", tmp_path / "audit.jsonl", tmp_path / "r.html"
    out.write_text('{"kept": 1}\n')
    html.write_text("<p>kept</p>\n")
    (tmp_path / "link.jsonl").symlink_to(out)
    os.link(inp, tmp_path / "hard.csv")
    base = ["evaluate", str(inp), "-o", str(out), "--html", str(html), "--signing-key", str(keys[0])]
    for ledger, name in ((out, "the output"), (tmp_path / "link.jsonl", "the output"),
                         (tmp_path / "hard.csv", "the input"), (inp, "the input"), (html, "the HTML report")):
        before = {p: p.read_bytes() for p in (inp, out, html)}
        assert main(base + ["--ledger", str(ledger)]) == 2
        err = capsys.readouterr().err
        assert f"is {name} file" in err and len(err.strip().splitlines()) == 1, err
        assert {p: p.read_bytes() for p in (inp, out, html)} == before
        assert not list(tmp_path.glob(".*groundlens-*"))  # nothing a later run would have to resume


def test_ledger_holds_no_text_of_the_users_by_default_and_is_created_owner_only(tmp_path, keys):
    """A failed fact's value and the source's value, and an error's message, stay out of the
    ledger unless --ledger-text; a new ledger is 0600 whatever the umask."""
    src = tmp_path / "in.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["question", "context", "response"])
        w.writerow(["What was the invoice total?", "The invoice total was 4471 dollars.",
                    "The invoice total was 9931 dollars."])
        w.writerow(["What is the capital of France?", "Paris is the capital of France.",
                    "Paris is the capital of France."])
        w.writerow(["Which zebra-orchid grew?", "", ""])
    ledger = tmp_path / "new" / "l.jsonl"
    old = os.umask(0)
    try:
        assert main(["evaluate", str(src), "-o", str(tmp_path / "o.csv"), "--ledger", str(ledger),
                     "--signing-key", str(keys[0])]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600
    text = ledger.read_text()
    for secret in ("9931", "4471", "invoice", "zebra"):
        assert secret not in text
    recs = list(iter_records(ledger))
    assert [r["reason"] for r in recs] == [
        "a specific fact is not supported by the source", "every fact it states is in the source", "error"]
    assert main(["evaluate", str(src), "-o", str(tmp_path / "o2.csv"), "--ledger", str(ledger),
                 "--signing-key", str(keys[0]), "--ledger-text"]) == 0
    recs = list(iter_records(ledger))
    assert "9931" in recs[3]["reason"] and recs[5]["reason"] != "error"
    assert verify_ledger(ledger, keys[1]).records == 6


# ---------------------------------------------------------------- FIFOs and devices


class _FifoFeeder:
    """A FIFO and a thread that writes one byte into it once a reader opens it: code that wrongly
    reads the FIFO gets that byte and an end instead of waiting for ever; :meth:`close` lets the
    thread finish when nothing opened it (by opening the reading end without blocking)."""

    def __init__(self, path: Path):
        self.path = path
        os.mkfifo(path)
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        with open(self.path, "wb") as fh:
            fh.write(b"x")

    def close(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            self.thread.join()
        finally:
            os.close(fd)


def test_fifos_and_devices_are_refused_as_keys_without_being_read(tmp_path, keys, capsys):
    _rows_csv(tmp_path / "in.csv")
    _ledger(tmp_path / "l.jsonl", keys[0], n=1)
    for name in ("sk", "pk"):
        feeder = _FifoFeeder(tmp_path / name)
        try:
            if name == "sk":
                argv = ["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "o.csv"),
                        "--ledger", str(tmp_path / "l.jsonl"), "--signing-key", str(feeder.path)]
            else:
                argv = ["verify", str(tmp_path / "l.jsonl"), "--public-key", str(feeder.path)]
            assert main(argv) == 2
        finally:
            feeder.close()
        err = capsys.readouterr().err
        assert "is a FIFO (named pipe), not a key file" in err and len(err.strip().splitlines()) == 1
    for device in ("/dev/null", "/dev/zero"):
        if not os.path.exists(device):
            continue
        with pytest.raises(GroundlensInputError, match="is a device, not a key file"):
            load_signing_key(device)
        assert main(["verify", str(tmp_path / "l.jsonl"), "--public-key", device]) == 2
        assert "is a device" in capsys.readouterr().err
    big = tmp_path / "big.key"
    big.write_bytes(keys[0].read_bytes() + b"\n" * 20000)
    with pytest.raises(GroundlensInputError, match="too large"):
        load_signing_key(big)


def test_a_fifo_as_the_ledger_is_refused_by_evaluate_recorder_and_verify(tmp_path, keys, capsys, monkeypatch):
    from groundlens_core.trace import Recorder

    _rows_csv(tmp_path / "in.csv")
    fifo = tmp_path / "l.fifo"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a reader and a writer: nothing that opens it can block
    try:
        assert main(["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "o.csv"), "--ledger", str(fifo),
                     "--signing-key", str(keys[0])]) == 2
        err = capsys.readouterr().err
        assert "is a FIFO (named pipe)" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "o.csv").exists()
        monkeypatch.setenv("GROUNDLENS_LEDGER", str(fifo))
        monkeypatch.setenv("GROUNDLENS_SIGNING_KEY", str(keys[0]))
        with pytest.raises(GroundlensInputError, match="FIFO"):
            Recorder("test")
        assert main(["verify", str(fifo), "--public-key", str(keys[1])]) == 2
        err = capsys.readouterr().err
        assert "is a FIFO (named pipe)" in err and "not found" not in err
        with pytest.raises(GroundlensInputError, match="FIFO"):
            verify_ledger(fifo, keys[1])
    finally:
        os.close(held)


# ---------------------------------------------------------------- a stray blank line


def test_a_blank_line_is_refused_by_name_and_verify_reports_it(tmp_path, keys):
    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0], n=3)
    with open(path, "ab") as fh:
        fh.write(b"\n")  # echo >> ledger
    data = path.read_bytes()
    with pytest.raises(GroundlensInputError, match=r"line 4 is blank; nothing was appended") as exc:
        Ledger(path, keys[0]).append(_bodies(1, "next"))
    assert "\n" not in str(exc.value) and path.read_bytes() == data
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.line) == (False, 4)
    _write(path, lines[:2] + [b""] + lines[2:])  # inside the chain
    v = verify_ledger(path, keys[1])
    assert (v.ok, v.line, v.problem) == (False, 3, "inserted")


def test_recorder_warns_with_the_count_of_records_not_written_never_silently(tmp_path, keys, caplog):
    from groundlens_core.trace.recorder.ledger import LedgerListener

    path = tmp_path / "l.jsonl"
    lines = _ledger(path, keys[0], n=2)
    with open(path, "ab") as fh:
        fh.write(b"\n")
    listener = LedgerListener(Ledger(path, keys[0]))
    listener.warn_interval = 1e9  # one warning per interval: the first failure at once, then none for ever
    caplog.set_level(logging.WARNING, logger="groundlens.ledger")
    for n in (2, 3, 4):
        listener._bodies = _bodies(n, f"b{n}")
        listener.on_batch_end()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "2 record(s) not written" in warnings[0] and "line 3 is blank" in warnings[0]
    _write(path, lines)  # the stray line taken out: the ledger takes records again
    listener._bodies = _bodies(1, "ok")
    listener.on_batch_end()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and "7 more record(s) were not written" in warnings[1] and "9 in all" in warnings[1]
    assert verify_ledger(path, keys[1]).records == 3
    listener.warn_interval = 0.0  # every failure warned when the interval is nil
    with open(path, "ab") as fh:
        fh.write(b"\n")
    for n in (1, 2):
        listener._bodies = _bodies(n, f"c{n}")
        listener.on_batch_end()
    assert [r.getMessage().split(" (")[0] for r in caplog.records[2:]] == [
        f"groundlens: {n} record(s) not written to the ledger {path}" for n in (1, 2)]


def test_evaluate_checks_the_ledgers_tail_before_scoring_and_leaves_nothing_behind(tmp_path, keys, capsys):
    _rows_csv(tmp_path / "in.csv")
    ledger = tmp_path / "l.jsonl"
    lines = _ledger(ledger, keys[0], n=2)
    with open(ledger, "ab") as fh:
        fh.write(b"\n")
    argv = ["evaluate", str(tmp_path / "in.csv"), "-o", str(tmp_path / "o.csv"), "--ledger", str(ledger),
            "--signing-key", str(keys[0])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"the ledger {ledger} line 3 is blank" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.csv").exists() and not list(tmp_path.glob(".*groundlens-*"))
    _write(ledger, lines)
    assert main(argv) == 0  # a plain run: no checkpoint of the refused run stands in its way
    assert verify_ledger(ledger, keys[1]).records == 5


# ---------------------------------------------------------------- empty ledgers, heads, resumes


def test_verify_fails_an_empty_ledger_unless_allowed_and_names_a_malformed_head(tmp_path, keys, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert main(["verify", str(empty), "--public-key", str(keys[1])]) == 1
    assert "no records" in capsys.readouterr().out
    assert main(["verify", str(empty), "--public-key", str(keys[1]), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["problem"] == "empty"
    assert main(["verify", str(empty), "--public-key", str(keys[1]), "--allow-empty"]) == 0
    assert "0 records" in capsys.readouterr().out
    _ledger(tmp_path / "l.jsonl", keys[0], n=2)
    for head in ("not-a-head", "abc123", "g" * 64):
        assert main(["verify", str(tmp_path / "l.jsonl"), "--public-key", str(keys[1]), "--head", head]) == 2
        err = capsys.readouterr().err
        assert "malformed" in err and "deleted" not in err and "cut off" not in err


def test_a_resume_cannot_switch_ledgers_or_keys(tmp_path, keys, capsys, monkeypatch):
    src, out = tmp_path / "in.csv", tmp_path / "o.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["question", "context", "response"])
        for i in range(6):
            w.writerow([f"What is item {i}?", f"Item {i} is a red box.", f"Item {i} is a red box."])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    base = ["evaluate", str(src), "-o", str(out), "--batch-size", "2", "--signing-key", str(keys[0])]
    interrupt(monkeypatch, base + ["--ledger", str(first)], chunks=1)
    capsys.readouterr()
    # another key is refused by the ledger itself (its last record is not that key's), before the resume is looked at
    for other, expected in ((["--ledger", str(second)], "cannot resume: ledger changed"),
                            (["--ledger", str(first), "--signing-key", str(keys[2])], "is signed by key")):
        assert main(base + other + ["--resume"]) == 2
        err = capsys.readouterr().err
        assert expected in err, err
    assert main(["evaluate", str(src), "-o", str(out), "--batch-size", "2", "--resume"]) == 2
    assert "ledger changed" in capsys.readouterr().err  # nor drop the ledger half way
    assert main(base + ["--ledger", str(first), "--resume"]) == 0
    assert not second.exists()
    recs = list(iter_records(first))
    assert sorted({r["row"] for r in recs}) == list(range(6)) and len({r["trace_id"] for r in recs}) == 1
    assert verify_ledger(first, keys[1]).ok
