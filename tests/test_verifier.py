"""The verifier: shipped weights and their manifest, the numpy head against the training head, units,
generated edits, and the band it decides with findings that never contradict it."""

from __future__ import annotations

import hashlib
import json
import random
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from groundlens_core import evaluate
from groundlens_core.scoring.decision import band_of_score, decide_verified
from groundlens_core.scoring.results import (
    Evidence,
    FactFinding,
    SentenceVerdict,
    Verdict,
    as_score,
    score_from_dict,
)
from groundlens_core.verifier import Verifier, edits, get_verifier, probability_score
from groundlens_core.verifier.units import CONTEXT_TOKENS, QUESTION_TOKENS, SENTENCE_TOKENS, build_units

DATA = resources.files("groundlens_core.data")


@pytest.fixture
def verifier_on(monkeypatch):
    """The verifier decides (it is opt-in: GROUNDLENS_VERIFIER=on)."""
    monkeypatch.setenv("GROUNDLENS_VERIFIER", "on")


# ---------------------------------------------------------------- the shipped weights


def test_the_shipped_weights_match_their_manifest_and_stay_small():
    weights = DATA.joinpath("verifier.safetensors").read_bytes()
    manifest = json.loads(DATA.joinpath("verifier.json").read_text("utf-8"))
    assert manifest["sha256"] == hashlib.sha256(weights).hexdigest()
    assert len(weights) <= 25 * 1024 * 1024
    assert set(manifest["fitted_on"]) == {"attrbench_train", "begin", "faithdial_audit", "hagrid", "summedits_train"}
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in manifest["fitted_on"].values())
    assert "faithbench" not in json.dumps(manifest["fitted_on"])
    assert manifest["settings"]["seed"] == manifest["generated"]["seed"]
    cal = manifest["calibration"]
    assert 0 < cal["flag_below"] < cal["trust_from"] < 1
    notice = DATA.joinpath("NOTICE.md").read_text("utf-8")
    for name in manifest["fitted_on"]:
        assert f"`{name}`" in notice


def test_changed_weights_are_refused():
    weights = DATA.joinpath("verifier.safetensors").read_bytes()
    manifest = json.loads(DATA.joinpath("verifier.json").read_text("utf-8"))
    broken = weights[:-1] + bytes([weights[-1] ^ 1])
    with pytest.raises(Exception, match="SHA-256"):
        Verifier.load(broken, manifest)


def test_the_onnx_cross_encoder_computes_what_the_training_model_computes():
    torch = pytest.importorskip("torch")
    from groundlens_core.embedding.resolve import resolve_model_path
    from groundlens_core.verifier.cross import OnnxCross
    from groundlens_core.verifier.states import ModelStates
    from groundlens_core.verifier.train import _batch, _torch_cross

    model_dir = Path(resolve_model_path(None)[0])
    model = _torch_cross(model_dir)()
    model.eval()
    rng = np.random.default_rng(0)
    with torch.no_grad():  # not the initial values only: every trained tensor takes part
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.from_numpy(rng.normal(0, 0.01, tuple(p.shape)).astype(np.float32)))
    units = build_units(ModelStates(), "Is it open?", "It is open on Mondays. Entry is 12 euros.", ["Closed on Mondays."])
    with torch.no_grad():
        expected = model(*_batch(units)).tolist()
    onnx = OnnxCross(model.tensors(), model_dir)
    got = [onnx.logit(u.ids, u.type_ids) for u in units]
    assert got == pytest.approx(expected, abs=1e-4)
    # one unit alone or beside a longer one in a padded batch: the same logit
    with torch.no_grad():
        alone = model(*_batch(units[:1])).tolist()
    assert alone[0] == pytest.approx(expected[0], abs=1e-5)


# ---------------------------------------------------------------- units


def test_a_long_context_costs_a_bounded_unit_per_sentence():
    from groundlens_core.verifier.states import ModelStates

    filler = " ".join(f"Room {i} is on floor {i % 7} and seats {10 + i} people." for i in range(150))
    assert len(filler) > 6000
    docs = [filler, "The museum is closed on Mondays.", "Tickets cost 12 euros."]
    units = build_units(ModelStates(), "When is the museum open?", "The museum is open on Mondays.", docs)
    assert len(units) == 1
    u = units[0]
    assert len(u.ids) <= QUESTION_TOKENS + SENTENCE_TOKENS + CONTEXT_TOKENS + 3  # [CLS], [SEP] twice
    assert u.type_ids[0] == 0 and u.type_ids[-1] == 1
    # the sentence about Mondays is found among 150 others, in its own document
    assert any(c.piece == 1 for c in u.context)


def test_a_long_sentence_is_read_in_windows_that_cover_it():
    from groundlens_core.verifier.states import ModelStates

    long = "The parcel " + ", ".join(f"item {i} weighs {i} kg" for i in range(60)) + "."
    units = build_units(ModelStates(), None, long, ["Item 1 weighs 1 kg."])
    assert len(units) > 1
    assert all(len(u.sentence.ids) <= SENTENCE_TOKENS for u in units)
    assert units[0].sentence.start == 0 and units[-1].sentence.end == len(long)


# ---------------------------------------------------------------- generated edits


def test_the_generator_is_deterministic_and_labels_each_kind():
    ctx = (
        "Refunds are issued within 14 days of the return. Orders over 50 euros ship free, unless they go "
        "to an island. The warehouse in Lyon ships parcels, letters and pallets. A call lasts up to 500 ms "
        "before it times out. Customers in France can pay by card."
    )
    rows = [("How long do refunds take?", ctx, "a"), ("Is shipping free?", ctx + " Extra.", "a")]
    first, second = edits.generate(rows, seed=3), edits.generate(rows, seed=3)
    assert first == second and first
    assert edits.generate(rows, seed=4) != first
    for pair in first:
        assert pair.label == (0 if pair.kind in {
            "number", "number_elsewhere", "entity", "polarity", "scope", "condition", "list_added",
            "added_claim", "conversion_wrong",
        } else 1)
        assert pair.response != pair.context


def test_a_conversion_keeps_the_value_and_a_wrong_factor_does_not():
    rng = random.Random(0)
    s = "A call lasts up to 500 ms before it times out."
    assert edits._conversion(rng, s) == "A call lasts up to 0.5 seconds before it times out."
    wrong = edits._conversion(rng, s, wrong=True)
    assert wrong is not None and "0.5 seconds" not in wrong


# ---------------------------------------------------------------- the band it decides


def test_the_score_is_a_monotone_map_of_the_probability_and_bands_are_its_intervals(verifier_on):
    v = get_verifier()
    assert v is not None
    ps = np.linspace(0, 1, 2001)
    scores = [probability_score(float(p), v.flag_below, v.trust_from) for p in ps]
    assert all(b >= a for a, b in zip(scores, scores[1:]))
    for p, s in zip(ps, scores):
        band = "flagged" if p < v.flag_below else ("review" if p < v.trust_from else "trusted")
        assert band_of_score(s) == band


def _finding(text: str, start: int, status: str = "contradicted") -> FactFinding:
    return FactFinding(text=text, kind="amount", start=start, end=start + len(text), sentence=0, status=status, source="x")


def _evidence(facts: tuple[FactFinding, ...]) -> Evidence:
    return Evidence(
        support=1.0, content_tokens=4, unsupported_tokens=0, weakest=None, sentences=(), context_passages=1, facts=facts
    )


def test_a_finding_in_a_sentence_the_verifier_trusts_is_never_the_reason():
    #      0         1         2         3
    #      0123456789012345678901234567890123
    resp = "Fee is 25 euros. Delivery 3 days."
    verdict = Verdict(
        probability=0.05,
        weakest=1,
        sentences=(SentenceVerdict(0, 16, 0.97), SentenceVerdict(17, 33, 0.05)),
        verifier="v",
    )
    ev = _evidence((_finding("25 euros", 7), _finding("3 days", 26)))
    d = decide_verified(verdict, ev, 0.3, 0.8)
    assert d.band == "flagged"
    assert [f.text for f in d.findings] == ["3 days"]
    assert "3 days" in d.reason and "25 euros" not in d.reason and resp


def test_a_trusted_response_names_no_finding_and_a_flagged_one_may_name_none():
    ev = _evidence((_finding("25 euros", 7),))
    trusted = decide_verified(Verdict(0.95, 0, (SentenceVerdict(0, 16, 0.95),), "v"), ev, 0.3, 0.8)
    assert trusted.band == "trusted" and trusted.findings == ()
    flagged = decide_verified(Verdict(0.1, 0, (SentenceVerdict(20, 30, 0.1),), "v"), ev, 0.3, 0.8)
    assert flagged.band == "flagged" and flagged.findings == ()
    assert "verifier" in flagged.reason


def test_evaluate_carries_the_verdict_and_its_fingerprint_names_the_verifier(verifier_on):
    res = evaluate(
        "When is the museum open?",
        "The museum is open from 10:00 to 18:00, Tuesday to Sunday.",
        ["The museum is open from 10:00 to 18:00, Tuesday to Sunday. It is closed on Mondays."],
    )
    v = get_verifier()
    assert res.verdict is not None and res.verdict.verifier == v.id
    assert res.fingerprint.endswith("+" + v.id)
    assert res.decision.probability == pytest.approx(res.verdict.probability, abs=1e-4)
    assert band_of_score(res.score) == res.triage
    again = evaluate(
        "When is the museum open?",
        "The museum is open from 10:00 to 18:00, Tuesday to Sunday.",
        ["The museum is open from 10:00 to 18:00, Tuesday to Sunday. It is closed on Mondays."],
    )
    assert again.to_json() == res.to_json()
    back = score_from_dict(json.loads(res.to_json()))
    assert back.verdict == res.verdict
    assert as_score(json.loads(res.to_json()), checked=True).verdict == res.verdict


def test_by_default_and_without_a_context_the_rules_decide(monkeypatch):
    monkeypatch.delenv("GROUNDLENS_VERIFIER", raising=False)
    off = evaluate("Where?", "In Delhi.", "The head office is in Delhi.")
    assert off.verdict is None and not off.decision.rule.startswith("verified")
    assert "+groundlens-verifier" not in off.fingerprint
    monkeypatch.setenv("GROUNDLENS_VERIFIER", "on")
    no_ctx = evaluate("What is the capital of France?", "Paris.")
    assert no_ctx.verdict is None and no_ctx.method == "dgi"
    on = evaluate("Where?", "In Delhi.", "The head office is in Delhi.")
    assert on.verdict is not None and on.decision.rule.startswith("verified")


def test_a_verdict_of_the_wrong_shape_in_a_saved_score_is_a_clear_error(verifier_on):
    res = evaluate("Where?", "In Delhi.", "The head office is in Delhi.")
    data = json.loads(res.to_json())
    data["verdict"]["sentences"] = "x"
    with pytest.raises(ValueError, match="sentences"):
        as_score(data, checked=True)


def test_scores_stay_inside_their_band_at_the_ends_and_under_lineage():
    from groundlens_core.scoring.decision import Upstream

    for p in (0.0, 0.349999, 0.35, 0.799999, 0.8, 1.0):
        verdict = Verdict(p, 0, (SentenceVerdict(0, 5, p),), "v")
        d = decide_verified(verdict, None, 0.35, 0.8)
        assert band_of_score(d.score) == d.band and d.score < 1.0
        capped = decide_verified(verdict, None, 0.35, 0.8, upstream=[Upstream(1, "flagged")])
        assert band_of_score(capped.score) == capped.band
        restated = decide_verified(verdict, None, 0.35, 0.8, restates_question=True)
        assert restated.band == "flagged" and band_of_score(restated.score) == "flagged"


def test_a_finding_across_two_windows_of_a_long_sentence_is_named():
    verdict = Verdict(0.1, 0, (SentenceVerdict(0, 470, 0.1), SentenceVerdict(471, 488, 0.2)), "v")
    ev = _evidence((_finding("at most 30 days", 468),))
    d = decide_verified(verdict, ev, 0.35, 0.8)
    assert d.band == "flagged" and [f.text for f in d.findings] == ["at most 30 days"]


def test_weights_fitted_on_another_base_model_are_refused():
    weights = DATA.joinpath("verifier.safetensors").read_bytes()
    manifest = json.loads(DATA.joinpath("verifier.json").read_text("utf-8"))
    manifest["base_model_sha256"] = "0" * 64
    with pytest.raises(Exception, match="GROUNDLENS_MODEL"):
        Verifier.load(weights, manifest)


def test_a_step_grounded_in_a_flagged_output_exports_only_the_findings_the_verifier_doubts(verifier_on):
    from dataclasses import replace

    from groundlens_core.scoring.decision import Upstream
    from groundlens_core.trace.otel.finding_spans import failed_findings

    v = get_verifier()
    assert v is not None
    ev = _evidence((_finding("25 euros", 7), _finding("3 days", 26)))
    high, low = min(1.0, v.trust_from + 0.01), v.flag_below + (v.trust_from - v.flag_below) / 2
    verdict = Verdict(low, 1, (SentenceVerdict(0, 16, high), SentenceVerdict(17, 33, low)), v.id, v.trust_from)
    own = decide_verified(verdict, ev, v.flag_below, v.trust_from)
    assert own.band == "review"
    score = replace(
        evaluate("Fee?", "Fee is 25 euros. Delivery 3 days.", "The fee is 25 euros."),
        evidence=ev,
        verdict=verdict,
        decision=decide_verified(verdict, ev, v.flag_below, v.trust_from, upstream=[Upstream(0, "flagged")]),
    )
    assert [f.text for f in failed_findings(score)] == ["3 days"]
    # a verdict saved without its edge: every own finding, as before
    other = replace(score, verdict=replace(verdict, trust_from=None))
    assert [f.text for f in failed_findings(other)] == ["25 euros", "3 days"]
    # the edge travels with the saved score, whatever this process has loaded
    back = as_score(json.loads(score.to_json()), checked=True)
    assert back.verdict.trust_from == v.trust_from
    assert [f.text for f in failed_findings(back)] == ["3 days"]


def test_an_abstention_goes_to_review_when_the_verifier_decides(verifier_on):
    res = evaluate("Is there parking?", "The document does not say whether there is parking.", "Tickets cost 12 euros.")
    assert res.decision.rule == "abstains" and res.triage == "review" and res.verdict is not None
