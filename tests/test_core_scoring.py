"""The scoring core on the real all-MiniLM-L6-v2 model: the method's math, bands, batch, errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import groundlens_core as gl
from groundlens_core.scoring.bands import BANDS, EPSILON, normalize, triage
from groundlens_core.scoring.results import ScoreError

CTX = "The Oberoi family is an Indian family famous for hotels. The Oberoi Group is a hotel company with its head office in Delhi."
Q = "The Oberoi family is part of a hotel company that has a head office in what city?"


@pytest.fixture(scope="module")
def emb():
    return gl.get_embedder()


def test_seed_tanh_table():
    # the seed's table of normalized SGI values (its 0.990 for raw 3.00 is tanh(2.7) = 0.99101 cut, not rounded)
    for raw, expected in [(0.5, 0.197), (1.0, 0.604), (1.5, 0.834), (2.0, 0.935), (3.0, 0.990)]:
        assert normalize("sgi", raw) == pytest.approx(expected, abs=1.1e-3)
        assert normalize("sgi", raw) == pytest.approx(math.tanh(raw - 0.3))
    assert normalize("sgi", 0.1) == 0.0  # max(0, raw - 0.3)
    assert normalize("dgi", -1.0) == 0.0 and normalize("dgi", 1.0) == 1.0 and normalize("dgi", 0.3) == pytest.approx(0.65)


@pytest.mark.parametrize("method", ["sgi", "dgi"])
def test_bands_agree_with_thresholds_and_explanations(method):
    band = BANDS[method]
    seen = set()
    for raw in np.linspace(-1.0, 3.0, 401):
        label = triage(method, float(raw))
        seen.add(label)
        if method == "sgi":
            assert (label == "flagged") == (raw < 0.95)
            assert (label == "trusted") == (raw > 1.20)
        else:
            assert (label == "flagged") == (raw <= 0.30)
            assert (label == "trusted") == (raw > band.strong_above)
    assert seen == {"flagged", "review", "trusted"}  # every method can reach every band
    # boundaries exactly as the method states them
    assert triage("sgi", 0.95) == "review" and triage("sgi", 1.20) == "review"
    assert triage("dgi", 0.30) == "flagged"


def test_degenerate_sgi_cases(emb):
    same_as_ctx = gl.compute_sgi(Q, CTX, CTX)
    assert same_as_ctx.value == 10.0 and same_as_ctx.normalized == pytest.approx(math.tanh(9.7))
    assert not same_as_ctx.flagged and same_as_ctx.triage == "trusted"
    assert same_as_ctx.d_response_context < EPSILON
    same_as_q = gl.compute_sgi(Q, Q, CTX)
    assert same_as_q.value == 0.0 and same_as_q.flagged and same_as_q.triage == "flagged"
    assert "restates the question" in same_as_q.explanation


def test_sgi_math_matches_embeddings(emb):
    r = "The head office of the Oberoi Group is in Delhi."
    res = gl.compute_sgi(Q, r, CTX)
    vq, vr, vc = emb.encode([Q, r, CTX]).astype(np.float64)
    assert res.d_response_question == pytest.approx(np.linalg.norm(vr - vq), abs=1e-12)
    assert res.d_response_context == pytest.approx(np.linalg.norm(vr - vc), abs=1e-12)
    assert res.value == pytest.approx(res.d_response_question / res.d_response_context)
    assert res.normalized == pytest.approx(math.tanh(max(0.0, res.value - 0.3)))
    assert res.flagged == (res.triage == "flagged")
    assert res.fingerprint.startswith("sentence-transformers/all-MiniLM-L6-v2@sha256:")
    assert res.version == gl.__version__
    assert "not a verdict of truth" in res.explanation


def test_grounded_answer_outranks_one_that_ignores_context():
    grounded = gl.evaluate(Q, "The Oberoi Group's head office is in Delhi, India.", CTX)
    ignoring = gl.evaluate(Q, "Many hotel companies are headquartered in large cities around the world.", CTX)
    assert grounded.method == ignoring.method == "sgi"
    assert grounded.value > ignoring.value


@pytest.mark.parametrize("ctx", [None, "", "   \n", [], ["", "  "]])
def test_blank_context_uses_dgi(ctx):
    res = gl.evaluate("What is the capital of France?", "The capital of France is Paris.", ctx)
    assert res.method == "dgi"
    assert -1.0 <= res.value <= 1.0 and res.normalized == pytest.approx((res.value + 1) / 2)
    assert res.direction == "bundled:halueval_general"


def test_context_pieces_are_joined():
    res = gl.evaluate(Q, "Delhi.", ["The Oberoi Group is a hotel company.", "  ", "Its head office is in Delhi."])
    assert res.method == "sgi" and res.context_chunks == 1


def test_dgi_math(emb):
    cal = gl.bundled_direction()
    q, r = "What is the capital of France?", "Paris is the capital and largest city of France."
    res = gl.compute_dgi(q, r)
    vq, vr = emb.encode([q, r]).astype(np.float64)
    d = vr - vq
    assert res.value == pytest.approx(float(np.dot(d / np.linalg.norm(d), cal.vector)), abs=1e-12)
    assert res.displacement_norm == pytest.approx(np.linalg.norm(d))


def test_batch_matches_single_byte_for_byte():
    items = [
        {"question": Q, "response": "Delhi", "context": CTX},
        {"question": "What is the capital of France?", "response": "Paris."},
        (Q, "Mumbai, the financial capital of India.", CTX),
        {"question": "Name a primary colour.", "response": "Blue is a primary colour."},
    ]
    batch = gl.evaluate_batch(items)
    assert [r.method for r in batch] == ["sgi", "dgi", "sgi", "dgi"]
    # shuffled, inside other items
    rev = gl.evaluate_batch(list(reversed(items)) + [{"question": "Why?", "response": "Because."}])
    for i, item in enumerate(items):
        q, r = (item["question"], item["response"]) if isinstance(item, dict) else item[:2]
        c = item.get("context") if isinstance(item, dict) else item[2]
        alone = gl.evaluate(q, r, c)
        assert alone.to_json() == batch[i].to_json() == rev[len(items) - 1 - i].to_json()


def test_same_bytes_in_another_process():
    res = gl.evaluate(Q, "The head office is in Delhi.", CTX).to_json()
    code = f"import groundlens_core as g; print(g.evaluate({Q!r}, {'The head office is in Delhi.'!r}, {CTX!r}).to_json())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == res


def test_batch_records_bad_rows_and_scores_the_rest():
    items = [
        {"question": "What is 2+2?", "response": "4"},
        {"question": "", "response": "blank question"},
        {"question": "Q?", "response": None},
        {"question": "Q?", "response": 42},
        "not an item",
        {"question": Q, "response": "Delhi", "context": CTX},
    ]
    res = gl.evaluate_batch(items)
    assert [r.method for r in res] == ["dgi", "error", "error", "error", "error", "sgi"]
    assert "question is blank" in res[1].error and "response is missing" in res[2].error
    assert "must be text" in res[3].error
    assert all(isinstance(r, ScoreError) and r.index == i for i, r in enumerate(res) if r.method == "error")
    with pytest.raises(gl.GroundlensInputError):
        gl.evaluate_batch(items, errors="raise")


def test_bad_single_inputs_raise_clear_errors():
    with pytest.raises(gl.GroundlensInputError, match="response is blank"):
        gl.evaluate("Q?", "  ")
    with pytest.raises(gl.GroundlensInputError, match="question is missing"):
        gl.evaluate(None, "x")  # type: ignore[arg-type]
    with pytest.raises(gl.GroundlensInputError, match="limit is"):
        gl.evaluate("Q?", "x" * 300_000)
    with pytest.raises(gl.GroundlensInputError, match="SGI needs a context"):
        gl.compute_sgi("Q?", "A.", "  ")


class _NaNEmbedder:
    """Failure injection only: a backend that returns NaN rows."""

    def __init__(self, inner):
        self.inner = inner
        self.model_id, self.backend, self.dim, self.max_tokens = inner.model_id, "nan-test", inner.dim, inner.max_tokens

    @property
    def fingerprint(self):
        return self.inner.fingerprint

    def encode(self, texts):
        out = self.inner.encode(texts)
        out = out.copy()
        out[:] = np.nan
        return out

    def count_tokens(self, text):
        return self.inner.count_tokens(text)

    def split(self, text, max_tokens=None):
        return self.inner.split(text, max_tokens)


def test_non_finite_embeddings_are_an_error_not_a_score(emb):
    from groundlens_core.embedding.cache import CachedEmbedder

    bad = CachedEmbedder(_NaNEmbedder(emb.inner))
    with pytest.raises(gl.EmbeddingError, match="non-finite"):
        gl.evaluate("Q?", "A.", embedder=bad)
    res = gl.evaluate_batch([("Q?", "A."), ("Q2?", "B.")], embedder=bad)
    assert all(r.method == "error" and "non-finite" in r.error for r in res)


def test_long_context_is_not_truncated(emb):
    filler = " ".join(f"Sentence {i} talks about the weather in a small town." for i in range(60))
    assert emb.count_tokens(filler) > emb.max_tokens
    fact = "The Oberoi Group's head office is in Delhi."
    ctx_a = filler + " " + fact
    ctx_b = filler + " The Taj Group's head office is in Mumbai."
    r = "The head office is in Delhi."
    for mode in ("mean", "nearest"):
        a = gl.evaluate(Q, r, ctx_a, long_context=mode)
        b = gl.evaluate(Q, r, ctx_b, long_context=mode)
        assert a.context_mode == mode and a.context_chunks > 1
        assert a.value != b.value  # the tail of the context counts: nothing was cut off
    near = gl.evaluate(Q, r, ctx_a, long_context="nearest")
    assert near.value > gl.evaluate(Q, r, ctx_b, long_context="nearest").value
    with pytest.raises(gl.GroundlensInputError):
        gl.evaluate(Q, r, ctx_a, long_context="first")


def test_long_response_is_pooled_not_cut(emb):
    long_r = " ".join(["Delhi is where the head office is."] * 80)
    assert emb.count_tokens(long_r) > emb.max_tokens
    res = gl.evaluate(Q, long_r, CTX)
    assert res.method == "sgi" and math.isfinite(res.value)


def test_split_pieces_cover_the_text(emb):
    text = " ".join(f"Word{i} alpha beta gamma." for i in range(400))
    pieces = emb.split(text)
    assert len(pieces) > 1
    assert all(emb.count_tokens(p) <= emb.max_tokens for p in pieces)
    assert " ".join(pieces).split() == text.split()


def test_result_json_round_trip():
    from groundlens_core.scoring.results import score_from_dict

    res = gl.evaluate(Q, "Delhi", CTX)
    again = score_from_dict(json.loads(res.to_json()))
    assert again == res and type(again) is type(res)


@pytest.mark.parametrize("method,raw", [("sgi", 0.949), ("sgi", 0.9499), ("sgi", 1.204), ("sgi", 0.95), ("sgi", 1.2),
                                        ("dgi", 0.302), ("dgi", 0.3), ("dgi", 0.5001), ("dgi", 0.499)])
def test_explanation_number_agrees_with_its_band(method, raw):
    import re

    from groundlens_core.scoring.bands import explain

    band = triage(method, raw)
    shown = float(re.match(r"[A-Z]+ (-?\d+\.\d\d)", explain(method, raw, band)).group(1))
    assert triage(method, shown) == band


def test_chunk_size_must_be_positive():
    with pytest.raises(gl.GroundlensInputError):
        gl.evaluate_batch([("Q?", "A.")], chunk_size=0)
