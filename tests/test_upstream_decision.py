"""The band of a step grounded in an unverified output is one decision, made by the core with the
upstream outputs as an input: ``evaluate(..., upstream=...)`` caps it, the recorder and the spans
job pass the upstream at scoring time (the batch's earlier calls included), and appending a step
to a trace never decides it again."""

from __future__ import annotations

import json

import pytest

import groundlens_core.scoring as scoring
from groundlens_core import evaluate
from groundlens_core.errors import GroundlensInputError
from groundlens_core.scoring import evaluate_batch
from groundlens_core.scoring.decision import (
    SCORE_EDGES,
    Decision,
    Upstream,
    decide_dgi,
    decide_support,
    folded,
    opening,
    output_sentences,
)
from groundlens_core.trace import ContextPiece, Trace, lineage
from groundlens_core.trace.recorder import CallRecord, Recorder
from groundlens_core.trace.recorder.calls import make_step, score_calls

CONTRACT = "Ending the contract early costs an early-termination fee of 15 % of the remaining contract value."
QUESTION = "What does it cost to end the contract early?"
ANSWER = "Ending the contract early costs an early-termination fee of 25 % of the remaining contract value."
EMAIL_Q = "Write the customer an email about the fee."
EMAIL = (
    "Dear customer, ending the contract early costs an early-termination fee of 25 % of the remaining contract value."
)
CHECK = "The contract says an early-termination fee of 15 % of the remaining contract value applies."


@pytest.fixture(scope="module")
def answer():
    res = evaluate(QUESTION, ANSWER, CONTRACT)
    assert res.triage == "flagged"
    return res


def _flagged(answer, origin: int = 0) -> Upstream:
    return Upstream.of(origin, ANSWER, "flagged", answer.decision.findings)


def test_the_core_caps_a_response_grounded_in_an_upstream_output(answer):
    alone = evaluate(EMAIL_Q, EMAIL, [ANSWER])
    assert alone.triage == "trusted"
    capped = evaluate(EMAIL_Q, EMAIL, [ANSWER], upstream=[_flagged(answer, 3)])
    d = capped.decision
    assert (d.band, d.rule, d.origin) == ("review", "grounded_in_flagged", 3)
    assert d.findings == answer.decision.findings  # the origin's findings, with what its source says
    assert capped.triage == "review" and not capped.flagged
    assert capped.score == pytest.approx(alone.score - (SCORE_EDGES[1] - SCORE_EDGES[0]))
    assert SCORE_EDGES[0] <= capped.score < SCORE_EDGES[1]
    # the explanation is rendered once, from the one decision: its opening is the decision's, and the
    # rest is what the same evidence says without the cap
    assert capped.explanation.startswith(opening(d))
    assert capped.explanation.removeprefix(opening(d)) == alone.explanation.removeprefix(opening(alone.decision))
    assert capped.explanation.count("Score ") == 1
    assert capped.value == alone.value and capped.evidence == alone.evidence


def test_without_upstream_the_scores_are_what_they_were(answer):
    for args in ((EMAIL_Q, EMAIL, [ANSWER]), (None, EMAIL, [ANSWER]), (QUESTION, ANSWER, None)):
        assert evaluate(*args, upstream=()).to_json() == evaluate(*args).to_json()
    items = [{"question": EMAIL_Q, "response": EMAIL, "context": [ANSWER]}]
    assert evaluate_batch(items)[0].to_json() == evaluate_batch([{**items[0], "upstream": []}])[0].to_json()


def test_a_response_leaning_on_a_real_source_beside_the_flagged_output_keeps_its_band(answer):
    alone = evaluate(QUESTION, CHECK, [CONTRACT, ANSWER])
    beside = evaluate(QUESTION, CHECK, [CONTRACT, ANSWER], upstream=[_flagged(answer)])
    assert beside.to_json() == alone.to_json() and beside.decision.rule != "grounded_in_flagged"


def test_flagged_stays_flagged_and_error_origins_name_no_findings(answer):
    bad = evaluate(QUESTION, ANSWER, [CONTRACT], upstream=[Upstream.of(0, CONTRACT)])  # its own facts fail
    assert bad.to_json() == evaluate(QUESTION, ANSWER, [CONTRACT]).to_json() and bad.decision.rule == "facts"
    err = evaluate(EMAIL_Q, EMAIL, [ANSWER], upstream=[Upstream.of(1, ANSWER, "error")])
    assert (err.decision.rule, err.decision.origin, err.decision.findings) == ("grounded_in_error", 1, ())
    assert err.explanation.startswith(opening(err.decision))
    assert "grounded in the output of #1, which could not be scored" in err.explanation


def test_no_sentence_evidence_to_tell_means_capped():
    up = Upstream(4, "flagged")
    assert decide_dgi(0.9, [up]).rule == "grounded_in_flagged" and decide_dgi(0.9, [up]).origin == 4
    # without a question the evidence is always there (support needs it), and it tells: the email's
    # sentence finds its passage in the answer, not in an upstream output with no sentence of it
    no_q = evaluate(None, EMAIL, [ANSWER], evidence=False, upstream=[up])
    assert no_q.decision.rule != "grounded_in_flagged"
    sgi_only = evaluate(EMAIL_Q, EMAIL, [ANSWER], evidence=False, upstream=[up])
    assert sgi_only.evidence is None and sgi_only.decision.rule == "grounded_in_flagged"
    assert sgi_only.explanation.startswith(opening(sgi_only.decision))


def test_the_first_upstream_leaned_on_names_the_rule(answer):
    other = Upstream.of(7, "A completely different sentence that nobody quotes anywhere.")
    d = evaluate(EMAIL_Q, EMAIL, [ANSWER], upstream=[other, _flagged(answer, 2)]).decision
    assert (d.rule, d.origin) == ("grounded_in_flagged", 2)  # the first does not carry its support
    ev = evaluate(None, EMAIL, [ANSWER]).evidence
    assert decide_support(ev, [_flagged(answer, 5), _flagged(answer, 2)]).origin == 5


def test_the_upstream_input_is_checked_and_normalised():
    with pytest.raises(GroundlensInputError, match="upstream must be a list of Upstream"):
        evaluate(EMAIL_Q, EMAIL, [ANSWER], upstream=[{"origin": 0}])  # type: ignore[list-item]
    bad = evaluate_batch([{"question": EMAIL_Q, "response": EMAIL, "context": [ANSWER], "upstream": "x"}])
    assert "upstream must be a list of Upstream" in bad[0].error
    assert folded("  The   FEE\n is 25 %. ") == "the fee is 25 %."
    assert output_sentences("Yes. " + ANSWER) == {folded(ANSWER)}  # "Yes." is too short to count
    assert lineage.folded is folded and lineage.MIN_CHARS == scoring.decision.MIN_CHARS


def test_the_capped_decision_survives_json(answer):
    capped = evaluate(EMAIL_Q, EMAIL, [ANSWER], upstream=[_flagged(answer)])
    back = Decision.from_dict(json.loads(capped.to_json())["decision"], type(answer.decision.findings[0]))
    assert back == capped.decision


# ---------------------------------------------------------------- the trace side


def test_lineage_gives_the_upstream_and_appending_only_links(answer):
    t = Trace(id="t", name="n", framework="test", started_at="2025-01-01T00:00:00Z")
    first = make_step(CallRecord("k", "answer", question=QUESTION, context=(ContextPiece(CONTRACT, "doc"),),
                                 response=ANSWER), 0, "a", answer.method, None, answer, None)  # fmt: skip
    t.add_step(first)
    pieces = (ContextPiece(ANSWER, "state:answer"),)
    up = lineage.upstream_of(t, pieces, "b")
    assert up == (_flagged(answer),)
    assert lineage.upstream_of(t, (ContextPiece(CONTRACT, "doc"),), "b") == ()
    alone = evaluate(EMAIL_Q, EMAIL, [ANSWER])
    call = CallRecord("k", "email", question=EMAIL_Q, context=pieces, response=EMAIL)
    step = t.add_step(make_step(call, 1, "b", alone.method, None, alone, None))
    assert step.cascade_from == ("a",) and step.result is alone and step.triage == "trusted"
    assert not hasattr(lineage, "_capped") and not hasattr(lineage, "_leans_on")
    assert not hasattr(scoring.decision, "grounded_in_unverified")


def _count_batches(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = scoring.evaluate_batch

    def counting(items, **kw):
        items = list(items)
        sizes.append(len(items))
        return real(items, **kw)

    monkeypatch.setattr(scoring, "evaluate_batch", counting)
    return sizes


def test_a_same_batch_cascade_in_the_recorder_is_capped(monkeypatch):
    sizes = _count_batches(monkeypatch)
    batches: list[int] = []
    rec = Recorder("test", quiet_seconds=3600)  # nothing is taken before the flush: one batch
    process = rec._worker.process

    def seen(items):
        batches.append(sum(1 for it in items if type(it).__name__ == "Call"))
        return process(items)

    rec._worker.process = seen  # type: ignore[method-assign]
    rec.record(CallRecord("k", "answer", question=QUESTION, context=(ContextPiece(CONTRACT, "doc"),), response=ANSWER))
    rec.record(CallRecord("k", "email", question=EMAIL_Q, context=(ContextPiece(ANSWER, "state:answer"),),
                          response=EMAIL))  # fmt: skip
    rec.record(CallRecord("k", "check", question=QUESTION,
                          context=(ContextPiece(CONTRACT, "doc"), ContextPiece(ANSWER, "state:answer")),
                          response=CHECK))  # fmt: skip
    trace = rec.get_trace("k", timeout=300)
    assert batches == [3]  # the three calls came in one batch
    first, email, check = trace.steps
    assert first.band == "flagged"
    assert email.cascade_from == (first.id,) and email.band == "review"
    d = email.decision
    assert (d.rule, d.origin, d.findings) == ("grounded_in_flagged", 0, first.decision.findings)
    assert email.explanation.startswith(opening(d)) and email.explanation.count("Score ") == 1
    assert check.cascade_from == (first.id,) and check.decision.rule != "grounded_in_flagged"
    # scored once, then the two calls that carry the flagged answer once more
    assert sizes == [3, 2]


def test_a_batch_without_an_unverified_output_is_scored_once(monkeypatch):
    sizes = _count_batches(monkeypatch)
    good = "An early-termination fee of 15 % of the remaining contract value applies when you end it early."
    rec = Recorder("test", quiet_seconds=3600)
    rec.record(CallRecord("k", "answer", question=QUESTION, context=(ContextPiece(CONTRACT, "doc"),), response=good))
    rec.record(CallRecord("k", "email", question=EMAIL_Q, context=(ContextPiece(good, "state:answer"),),
                          response="Dear customer, " + good))  # fmt: skip
    trace = rec.get_trace("k", timeout=300)
    assert [s.band for s in trace.steps][0] != "flagged" and sizes == [2]


def test_a_chain_in_one_batch_passes_the_cap_on(answer):
    """A flagged answer, an email grounded in it, a reminder grounded in the email: each decided with
    what came before it in the batch, the cap passed on naming the first origin."""
    t = Trace(id="t", name="n", framework="test", started_at="2025-01-01T00:00:00Z")
    reminder = "Reminder: " + EMAIL
    calls = [
        CallRecord("k", "answer", question=QUESTION, context=(ContextPiece(CONTRACT, "doc"),), response=ANSWER),
        CallRecord("k", "email", question=EMAIL_Q, context=(ContextPiece(ANSWER, "state"),), response=EMAIL),
        CallRecord(
            "k", "remind", question="Remind the customer.", context=(ContextPiece(EMAIL, "state"),), response=reminder
        ),  # fmt: skip
    ]
    placed = [(t, k, f"s{k}") for k in range(3)]
    outcomes = score_calls(calls, dict, placed)
    steps = [t.add_step(make_step(c, k, f"s{k}", *o)) for k, (c, o) in enumerate(zip(calls, outcomes))]
    assert [s.band for s in steps] == ["flagged", "review", "review"]
    assert [s.decision.rule for s in steps[1:]] == ["grounded_in_flagged", "grounded_in_flagged"]
    assert steps[2].decision.origin == 0 and steps[2].cascade_from == ("s0", "s1")
    # the same calls one at a time, each appended before the next is scored: the same decisions
    t2 = Trace(id="t2", name="n", framework="test", started_at="2025-01-01T00:00:00Z")
    for k, c in enumerate(calls):
        (o,) = score_calls([c], dict, [(t2, k, f"s{k}")])
        t2.add_step(make_step(c, k, f"s{k}", *o))
    assert [s.decision for s in t2.steps] == [s.decision for s in steps]


def test_the_spans_job_decides_a_later_span_with_the_earlier_flagged_answer(tmp_path, monkeypatch):
    from stored_traces import T0_NS

    from groundlens_core.trace.sources.job import Filters, run
    from groundlens_core.trace.sources.otlp_files import OtlpFiles

    sizes = _count_batches(monkeypatch)
    tid = "ab" * 16

    def span(sid, name, kind, start, end, **values):
        attrs = [{"key": "openinference.span.kind", "value": {"stringValue": kind}}]
        attrs += [{"key": k.replace("_", "."), "value": {"stringValue": v}} for k, v in values.items()]
        return {"traceId": tid, "spanId": f"{sid:016x}", "parentSpanId": "" if sid == 1 else f"{1:016x}",
                "name": name, "kind": 1, "startTimeUnixNano": str(T0_NS + start * 1_000_000),
                "endTimeUnixNano": str(T0_NS + end * 1_000_000), "attributes": attrs}  # fmt: skip

    spans = [
        span(2, "retrieve", "RETRIEVER", 1, 2, **{"retrieval_documents_0_document_content": CONTRACT}),
        span(3, "answer", "LLM", 10, 20, input_value=QUESTION, output_value=ANSWER),
        span(4, "notes", "TOOL", 30, 40, output_value=ANSWER),
        span(5, "email", "LLM", 50, 60, input_value=EMAIL_Q, output_value=EMAIL),
        span(1, "agent", "CHAIN", 0, 100),
    ]
    src = tmp_path / "spans.jsonl"
    src.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    run(OtlpFiles([src]), Filters(), output=tmp_path / "out.jsonl")
    answer, email = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert answer["band"] == "flagged"
    assert email["cascade_from"] == [answer["id"]]
    assert email["band"] == "review" and email["step"]["result"]["decision"]["rule"] == "grounded_in_flagged"
    assert email["explanation"].startswith(f"Score {email['score']:.2f}, review: grounded in the flagged output of #0")
    assert sizes == [2, 1]  # the email scored again once the answer turned out flagged


def test_a_call_scored_in_line_is_decided_with_its_upstream_when_recorded():
    """A guard, a revision loop or a filter scores a call in line, before its trace's earlier steps
    are decided: what the agent saw stays as it was, and the recorded step is decided again with the
    flagged output its context carries, in a later batch or in the same one."""
    inline = evaluate(EMAIL_Q, EMAIL, [ANSWER])
    assert inline.triage == "trusted"  # in line, nothing says the answer it leans on was flagged

    def answer_call(key: str) -> CallRecord:
        return CallRecord(key, "answer", question=QUESTION, context=(ContextPiece(CONTRACT, "doc"),), response=ANSWER)

    def email_call(key: str) -> CallRecord:
        piece = ContextPiece(ANSWER, "state:answer")
        return CallRecord(key, "email", question=EMAIL_Q, context=(piece,), response=EMAIL, result=inline)

    rec = Recorder("test", quiet_seconds=0.01)
    rec.record(answer_call("later"))
    assert rec.flush(300)
    rec.record(email_call("later"))
    answer_step, email_step = rec.get_trace("later", timeout=300).steps
    assert answer_step.band == "flagged" and email_step.cascade_from == (answer_step.id,)
    assert email_step.band == "review" and email_step.decision.rule == "grounded_in_flagged"
    assert inline.triage == "trusted"  # the agent's in-line result is untouched

    rec = Recorder("test", quiet_seconds=0.01)
    with rec._lock:  # both in one batch
        rec.record(answer_call("same"))
        rec.record(email_call("same"))
    answer_step, email_step = rec.get_trace("same", timeout=300).steps
    assert (answer_step.band, email_step.band) == ("flagged", "review")
