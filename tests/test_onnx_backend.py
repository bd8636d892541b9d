"""The ONNX Runtime backends: the graph written offline from the packaged weights and cached with a
checksum, rows close to the packed fp32 pass, bit-identical whatever the batch, the lanes or the
process, sentence spans pooled from the whole text's pass, and the automatic default."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from groundlens_core.embedding import default_backend, get_embedder, onnx_backend, packed  # noqa: E402
from groundlens_core.embedding.lanes import encode_lanes  # noqa: E402
from groundlens_core.embedding.onnx_backend import OnnxMiniLMEmbedder, mean_pool  # noqa: E402
from groundlens_core.embedding.resolve import resolve_model_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gl-cache")


@pytest.fixture(scope="module")
def onnx32(cache) -> OnnxMiniLMEmbedder:
    mp = pytest.MonkeyPatch()
    mp.setenv("GROUNDLENS_CACHE_DIR", str(cache))
    try:
        return OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "fp32")
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = random.Random(11)
    words = "the a of cat dog river 1844 Paris magazine quickly ? . , ! ünïcode 東京 😀 \n".split(" ")
    synth = ["", " ", "a", "Hi.", "One sentence. Another one!\nA third?"]
    synth += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 200))) for _ in range(10)]
    return synth


def test_graph_is_cached_with_its_checksum_and_rewritten_when_it_does_not_match(onnx32, cache, monkeypatch):
    files = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert files == ["model-fp32.onnx", "model-fp32.onnx.sha256"]
    model = next(cache.rglob("model-fp32.onnx"))
    check = model.with_name(model.name + ".sha256")
    import hashlib

    data = model.read_bytes()
    assert hashlib.sha256(data).hexdigest() == check.read_text().strip()
    # the same weights give the same bytes: written again from scratch, nothing changes
    assert onnx_backend._build(resolve_model_path()[0], "fp32") == data
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(cache))
    model.write_bytes(data[:-10] + b"0123456789")  # damaged on disk
    again = OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "fp32")
    assert model.read_bytes() == data
    assert np.array_equal(again.encode(["Paris is in France."]), onnx32.encode(["Paris is in France."]))


def test_an_unwritable_cache_builds_the_graph_in_memory(onnx32, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(blocker))
    emb = OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "fp32")
    assert np.array_equal(emb.encode(["Paris is in France."]), onnx32.encode(["Paris is in France."]))


def test_the_session_reads_the_checked_cache_file_not_bytes_from_python(onnx32, cache, tmp_path, monkeypatch):
    """A session made from bytes holds the GIL for the whole parse (the agent's thread waits it
    out during the first load); made from a path it reads the file without the GIL. The bytes
    stay the fallback where nothing can be cached."""
    given: list[object] = []
    import onnxruntime

    real = onnxruntime.InferenceSession

    def spy(source, *args, **kwargs):
        given.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", spy)
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(cache))
    OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "fp32")
    assert given == [str(next(cache.rglob("model-fp32.onnx")))]
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(blocker))
    OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "fp32")
    assert isinstance(given[-1], bytes) and given[-1] == next(cache.rglob("model-fp32.onnx")).read_bytes()


def test_a_graph_file_changed_while_it_loads_is_not_used(onnx32, cache, monkeypatch, caplog):
    """Checked, then replaced before the session read it: the session is made from the checked bytes."""
    import onnxruntime

    given: list[object] = []
    real = onnxruntime.InferenceSession
    monkeypatch.setattr(onnxruntime, "InferenceSession", lambda source, *a, **k: given.append(source) or real(source, *a, **k))
    stamps = iter([(1, 1, 1), (1, 1, 1), (2, 2, 2)])  # before the read, after it, after the load
    monkeypatch.setattr(onnx_backend, "_stamp", lambda path: next(stamps))
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(cache))
    emb = OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "fp32")
    assert isinstance(given[0], str) and isinstance(given[1], bytes) and len(given) == 2
    assert "changed while it was loaded" in caplog.text
    assert np.array_equal(emb.encode(["Paris is in France."]), onnx32.encode(["Paris is in France."]))


def test_close_to_the_packed_fp32_pass(onnx32, texts):
    ref = packed.PackedMiniLMEmbedder(resolve_model_path()[0], MODEL_ID).encode(texts)
    got = onnx32.encode(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    assert np.abs(got - ref).max() < 2e-6
    assert onnx32.backend == "onnx-fp32" and onnx32.fingerprint.endswith("+onnx")
    assert onnx32.fingerprint.removesuffix("+onnx") == get_embedder(backend="packed-torch").fingerprint


def test_bit_identical_alone_in_a_batch_with_lanes_and_in_another_process(onnx32, texts, tmp_path, cache):
    alone = np.stack([onnx32.encode([t])[0] for t in texts])
    rng = random.Random(5)
    for size in (2, 7, len(texts)):
        batch = rng.sample(range(len(texts)), size)
        assert np.array_equal(onnx32.encode([texts[i] for i in batch]), alone[batch])
    with encode_lanes(2):
        assert np.array_equal(onnx32.encode(texts), alone)
    (tmp_path / "texts.txt").write_text("\x1e".join(texts), encoding="utf-8")
    code = (
        "import sys, pathlib, numpy as np\n"
        "from groundlens_core.embedding.resolve import resolve_model_path\n"
        "from groundlens_core.embedding.onnx_backend import OnnxMiniLMEmbedder\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "texts = (d / 'texts.txt').read_text(encoding='utf-8').split('\\x1e')\n"
        f"e = OnnxMiniLMEmbedder(resolve_model_path()[0], {MODEL_ID!r}, 'fp32')\n"
        "np.save(d / 'out.npy', e.encode(texts[::-1])[::-1])\n"
    )
    env = dict(os.environ, GROUNDLENS_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, cwd=REPO, timeout=300)
    assert np.array_equal(np.load(tmp_path / "out.npy"), alone)


def test_int8_is_its_own_backend_deterministic_and_close(cache, texts, onnx32, monkeypatch):
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(cache))
    int8 = OnnxMiniLMEmbedder(resolve_model_path()[0], MODEL_ID, "int8")
    assert int8.backend == "onnx-int8" and int8.fingerprint.endswith("+onnx-int8")
    alone = np.stack([int8.encode([t])[0] for t in texts])
    assert np.array_equal(int8.encode(texts[::-1])[::-1], alone)
    cos = (alone.astype(np.float64) * onnx32.encode(texts)).sum(1)
    assert 0.95 < cos.min() < 1.0 - 1e-6  # close, and not the fp32 bits


def test_spans_are_pooled_from_the_whole_texts_pass(onnx32):
    text = "Paris is the capital of France. It has 2.1 million people!"
    cut = text.index(" It")
    rows, spans = onnx32.encode_spans([text, "alone"], [[(0, cut), (cut + 1, len(text))], []])
    assert np.array_equal(rows, onnx32.encode([text, "alone"]))
    assert spans[0].shape == (2, 384) and spans[1].shape == (0, 384)
    enc = onnx32._tok.encode(text)
    states = onnx32.token_states(enc.ids)
    first = [i for i, (a, b) in enumerate(enc.offsets) if b > 0 and a < cut and 0 < i < len(enc.ids) - 1]
    assert np.array_equal(spans[0][0], mean_pool(states, first[0], first[-1] + 1))
    # a sentence pooled inside its text is not the sentence embedded alone, but close to it
    alone = onnx32.encode([text[:cut]])[0]
    assert 0.8 < float(alone @ spans[0][0]) < 0.9999


def test_every_backend_pools_spans_the_same_way(onnx32):
    text = "Paris is the capital of France. It has 2.1 million people!"
    spans = [[(0, 31), (32, len(text))]]
    ref = onnx32.encode_spans([text], spans)[1][0]
    for backend in ("packed-torch", "sentence-transformers"):
        inner = get_embedder(backend=backend).inner
        got = inner.encode_spans([text], spans)[1][0]
        assert np.abs(got - ref).max() < 2e-6, backend


@pytest.mark.parametrize("bf16", [True, False])
def test_the_default_is_onnx_fp32_on_every_cpu(monkeypatch, bf16):
    """The same default with and without native bf16: a row scores the same on every machine."""
    monkeypatch.delenv("GROUNDLENS_BACKEND", raising=False)
    monkeypatch.setattr(packed, "bf16_supported", lambda: bf16)
    assert default_backend() == "onnx-fp32"
    monkeypatch.setattr(onnx_backend, "onnx_available", lambda: False)
    assert default_backend() == "packed-torch"
    monkeypatch.setenv("GROUNDLENS_BACKEND", "onnx-int8")
    assert default_backend() == "onnx-int8"
