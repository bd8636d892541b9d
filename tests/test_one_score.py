"""One value, one name, and the decision as data: ``result.score`` is the number every consumer
carries (the CSV, the LangChain evaluator, OTel), and ``result.decision`` is why, which every text is
rendered from. Real embedder, real files, no stubs."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
from cli_io import write_csv

from groundlens_core import Decision, evaluate
from groundlens_core.cli import main
from groundlens_core.ledger import decision_record
from groundlens_core.plugins.langchain import GroundlensEvaluator
from groundlens_core.scoring.decision import RULES, band_of_score
from groundlens_core.scoring.fields import FIELDS, score_fields
from groundlens_core.scoring.results import REDACTED, as_score, redact_score_dict
from groundlens_core.trace import Step, Trace
from groundlens_core.trace.html.rows import _reason

QUESTION = "What does it cost to end the contract early?"
CONTRACT = "Ending the contract early costs an early-termination fee of 15 % of the remaining contract value."
WRONG = "Ending early costs an early-termination fee of 25 % of the remaining contract value."
RIGHT = "You pay a fee of 15 percent of what is left."


def test_evaluate_has_score_and_rank_is_a_deprecated_alias():
    res = evaluate(QUESTION, WRONG, CONTRACT)
    assert res.triage == "flagged" and band_of_score(res.score) == "flagged"
    with pytest.warns(DeprecationWarning, match="use .score"):
        assert res.rank == res.score
    assert res.score != res.normalized  # the ranked value is not tanh(SGI)
    assert res.explanation.startswith(f"Score {res.score:.2f}, flagged: ")


def test_evaluate_score_equals_the_csv_groundlens_score(tmp_path):
    rows = [
        {"question": QUESTION, "response": WRONG, "context": CONTRACT},
        {"question": QUESTION, "response": RIGHT, "context": CONTRACT},
        {"question": "Who wrote Hamlet?", "response": "William Shakespeare wrote Hamlet.", "context": ""},
        {"question": "", "response": RIGHT, "context": CONTRACT},
    ]
    src = write_csv(tmp_path / "in.csv", rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "out.csv")]) == 0
    with open(tmp_path / "out.csv", newline="", encoding="utf-8") as fh:
        out = list(csv.DictReader(fh))
    assert len(out) == len(rows)
    for row, cells in zip(rows, out):
        res = evaluate(row["question"] or None, row["response"], row["context"] or None)
        assert float(cells["groundlens_score"]) == pytest.approx(res.score, abs=1e-12), row
        assert cells["groundlens_triage"] == res.triage and "groundlens_rank" not in cells  # one name for the score
    assert [c["groundlens_method"] for c in out] == ["sgi", "sgi", "dgi", "support"]
    assert "25 % \u2014 the source says 15 %" in out[0]["groundlens_facts"]


def test_a_row_written_by_an_older_version_with_only_groundlens_rank_still_ranks_and_records():
    from groundlens_core.batch.columns import risk_key

    older = {"groundlens_method": "sgi", "groundlens_triage": "review", "groundlens_rank": "0.4"}
    assert risk_key(older) == risk_key({**older, "groundlens_score": 0.4, "groundlens_rank": None})
    rec = decision_record(method="sgi", band="review", result={**older, "groundlens_rank": 0.4})
    assert rec["scores"]["score"] == 0.4


def test_every_scored_row_says_why_in_a_reason_column_even_without_facts(tmp_path):
    """A flagged row whose ``groundlens_facts`` is empty still says why, outside the report."""
    rows = [
        {"question": QUESTION, "response": WRONG, "context": CONTRACT},
        {"question": QUESTION, "response": RIGHT, "context": CONTRACT},
        {"question": "Who wrote Hamlet?", "response": "Hamlet was written by Christopher Marlowe.", "context": ""},
    ]
    src = write_csv(tmp_path / "in.csv", rows)
    assert main(["evaluate", str(src), "-o", str(tmp_path / "out.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert list(out[0])[-1] == "groundlens_reason"
    for row, cells in zip(rows, out):
        res = evaluate(row["question"], row["response"], row["context"] or None)
        assert cells["groundlens_reason"] == res.decision.reason and res.decision.reason, row
    assert "the source says 15 %" in out[0]["groundlens_reason"]
    assert not out[2]["groundlens_facts"] and out[2]["groundlens_reason"]  # no facts, still a reason


def test_evaluator_carries_the_score_and_ranks_a_wrong_fee_below_a_correct_one():
    ev = GroundlensEvaluator()
    got = {a: ev(inputs={"question": QUESTION, "context": CONTRACT}, outputs={"answer": a}) for a in (WRONG, RIGHT)}
    for answer, out in got.items():
        res = evaluate(QUESTION, answer, CONTRACT)
        assert out["score"] == res.score and out["metadata"]["score"] == res.score
        assert out["metadata"]["value"] == res.value and out["metadata"]["normalized"] == res.normalized
        assert out["comment"] == res.explanation
    assert got[WRONG]["score"] < got[RIGHT]["score"]
    assert got[WRONG]["metadata"]["triage"] == "flagged" and got[WRONG]["metadata"]["rule"] == "facts"
    assert got[WRONG]["metadata"]["facts"] == ["25 % \u2014 the source says 15 %"]
    strings = ev.evaluate_strings(prediction=WRONG, input=QUESTION, reference=CONTRACT)
    assert strings["score"] == got[WRONG]["score"] and strings["value"] == got[WRONG]["metadata"]["value"]
    from langsmith.schemas import Example, Run

    run = Run(id="9f0c9cbb-4c5d-4b59-9c5e-3f3c3f3c3f3c", name="qa", run_type="chain",
              inputs={"question": QUESTION, "context": CONTRACT}, outputs={"answer": RIGHT},
              start_time="2026-01-01T00:00:00", trace_id="9f0c9cbb-4c5d-4b59-9c5e-3f3c3f3c3f3c")  # fmt: skip
    assert ev.evaluate_run(run)["score"] == got[RIGHT]["score"]
    example = Example(id="9f0c9cbb-4c5d-4b59-9c5e-3f3c3f3c3f3d", inputs={"question": QUESTION},
                      outputs={"context": CONTRACT}, dataset_id="9f0c9cbb-4c5d-4b59-9c5e-3f3c3f3c3f3e",
                      created_at="2026-01-01T00:00:00")  # fmt: skip
    run2 = (
        dataclasses.replace(run, inputs={"question": QUESTION})
        if dataclasses.is_dataclass(run)
        else run.copy(update={"inputs": {"question": QUESTION}})
    )
    assert ev.evaluate_run(run2, example)["score"] == got[RIGHT]["score"]  # the context from the example


def test_evaluator_on_the_shortest_answers_a_wrong_fee_scores_below_a_correct_paraphrase():
    ev = GroundlensEvaluator()
    inputs = {"question": "What do I pay if I end my contract early?",
              "context": "an early-termination fee of 15 % of the remaining contract value"}  # fmt: skip
    wrong = ev(inputs=inputs, outputs={"answer": "25 %"})
    right = ev(inputs=inputs, outputs={"answer": "a fee of 15 percent of what is left"})
    assert wrong["score"] < right["score"]
    assert wrong["metadata"]["triage"] == "flagged" and right["metadata"]["triage"] != "flagged"
    assert wrong["comment"].startswith(f"Score {wrong['score']:.2f}, flagged: ")


def test_the_decision_is_data_and_every_text_is_rendered_from_it():
    res = evaluate(QUESTION, WRONG, CONTRACT)
    d = res.decision
    assert isinstance(d, Decision) and d.band == res.triage and d.score == res.score and d.rule == "facts"
    assert [(f.text, f.kind, f.status, f.source) for f in d.findings] == [("25 %", "percent", "contradicted", "15 %")]
    assert d.reason == "a specific fact is not supported by the source: 25 % \u2014 the source says 15 %"
    assert d.render(values=False) == "a specific fact is not supported by the source"
    assert res.explanation.startswith(f"Score {res.score:.2f}, flagged: {d.reason}.")
    # the JSON carries it, and reads back to the same object
    data = res.to_dict()
    assert data["score"] == res.score and "rank" not in data
    assert data["decision"]["rule"] == "facts" and data["decision"]["reason"] == d.reason
    assert as_score(json.loads(json.dumps(data))) == res
    # redaction takes the caller's values out of the decision too
    hidden = redact_score_dict(data)
    assert "25 %" not in json.dumps(hidden) and "15 %" not in json.dumps(hidden)
    assert hidden["decision"]["findings"][0]["source"] == REDACTED
    assert as_score(hidden).decision.render(values=False) == d.render(values=False)
    # one projection of a score into fields, the names every consumer uses
    fields = score_fields(res)
    assert tuple(fields) == FIELDS and fields["score"] == res.score and fields["rule"] == "facts"
    assert set(RULES) >= {"facts", "grounded", "grounded_in_flagged", "grounded_in_error"}


def test_consumers_render_from_the_decision_never_from_the_explanation():
    """A score whose explanation says nothing: the report row and the ledger still give the reason,
    because they read the decision."""
    res = evaluate(QUESTION, WRONG, CONTRACT)
    mute = dataclasses.replace(res, explanation="(no text)")
    step = Step(id="s0", index=0, node="answer", kind="llm", method="sgi", result=mute, triage=mute.triage,
                question=QUESTION, response=WRONG)  # fmt: skip
    assert _reason(step) == "fact: 25 % \u2014 the source says 15 %"
    rec = decision_record(method="sgi", band="flagged", result=mute, response=WRONG)
    assert rec["reason"] == "a specific fact is not supported by the source" and rec["rule"] == "facts"
    assert rec["scores"]["score"] == res.score
    from_dict = decision_record(method="sgi", band="flagged", result=mute.to_dict(), response=WRONG)
    assert from_dict["reason"] == rec["reason"]
    trace = Trace(id="t", name="t", framework="test", started_at="2026-01-01T00:00:00Z", steps=[step])
    assert f"score={res.score:.2f} flagged" in trace.summary()


def test_an_older_saved_score_reads_with_its_rank_as_the_score():
    old = {"method": "sgi", "value": 1.0, "normalized": 0.5, "flagged": False, "triage": "review",
           "explanation": "SGI 1.00 ...", "fingerprint": "fp", "backend": "b", "version": "0", "rank": 0.4,
           "d_response_question": 1.0, "d_response_context": 1.0, "context_mode": "whole", "context_chunks": 1}  # fmt: skip
    res = as_score(old)
    assert res.score == 0.4 and res.decision is None
    step = Step(id="s0", index=0, node="n", kind="llm", method="sgi", result=old, triage="review")
    assert step.score == 0.4 and _reason(step) == "SGI 1.00 ..."
