"""An exact, batch-invariant BERT sentence embedder in plain torch (no transformers import).

Why: sentence-transformers pads a batch to its longest text and lets the GEMM kernels see a
row count that depends on the batch, so a text's embedding moves by ~1e-7 with its company. Our
scores are promised byte-identical whether a text is scored alone, in a batch, or in another
process, so this backend makes every floating-point operation a function of the text alone:

* all texts of a call are tokenized and their tokens *packed* into one ``(T, hidden)`` matrix,
  without padding between texts;
* every row-wise stage (linear layers, LayerNorm, GELU) runs over fixed-size row tiles of exactly
  ``TILE`` rows (the last tile zero-padded), so each kernel call has one shape whatever the batch;
  texts of at most ``TINY_TILE`` / ``SMALL_TILE`` tokens go in lanes of 32- / 64-row tiles (the
  lane depends on the text's own length only), so a short text alone does not pay for 128 rows
  (this is what brings a single check with a cached question and context to about 10 ms);
* GEMM inner dimensions are cut to at most ``K_CHUNK`` (see ``_linear_kchunked``), which makes the
  bits independent of torch's thread count too (measured 1-4 threads);
* attention, mean pooling and L2 normalisation run per text on its own exact-length slice.

The whole forward pass runs as one TorchScript function (:func:`_packed_forward`), which releases
the GIL once for the pass instead of once per torch call. Why: a forward is ~2,000 small torch calls,
each of which gives the GIL away and must win it back; while an agent's thread runs Python flat out,
every win waits up to the interpreter's 5 ms switch interval, and the recorder's worker runs at a
quarter of its speed. The scripted function calls the very same ATen kernels in the very
same order with the graph optimizer off, so the bits are those of the eager code (``_forward_eager``,
kept as the reference and as the fallback where TorchScript is unavailable); the tests compare both.

A text encoded alone goes through the very same path, hence bit-identical rows. Across machines
with a different CPU instruction set or MKL build the bits may differ (~1e-7), as any float
computation; on one machine they are reproducible across processes and thread counts.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
import warnings
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from groundlens_core.embedding import first_load
from groundlens_core.embedding.lanes import current_lanes, run_jobs
from groundlens_core.embedding.tokens import SpanPassEmbedder, check_fits, token_range
from groundlens_core.errors import GroundlensInputError

TILE = 128  # rows per kernel call; every linear/LayerNorm/GELU call sees exactly (TILE, k)
SMALL_TILE = 64  # texts of <= this many tokens (with [CLS]/[SEP]) use tiles of this size; 0 = off.
TINY_TILE = 32  # and texts of <= 32 tokens (most answers) tiles of 32 rows; 0 = off.
# Trade-off measured on 590 dev texts: the lane makes one-call batches ~12% slower and
# one-text-at-a-time encoding ~30% faster.
K_CHUNK = 768  # longest inner dimension per GEMM call (see _linear_kchunked)
GROUP_TOKENS = 8192  # packed tokens per forward pass (bounds memory; does not change results)
LANE_JOB_TOKENS = 1024  # ... and per job when encode lanes share a call's passes (lanes.py)

log = logging.getLogger("groundlens.embedding")


def _embed_packed(
    flat: torch.Tensor,
    pos: torch.Tensor,
    total: int,
    padded: int,
    word: torch.Tensor,
    pos_emb: torch.Tensor,
    type0: torch.Tensor,
    emb_lnw: torch.Tensor,
    emb_lnb: torch.Tensor,
    tile_rows: int,
    eps: float,
) -> torch.Tensor:
    """The packed rows' input embeddings (fp32, ``padded`` rows): shared by both scripted passes."""
    H = word.shape[1]
    x = torch.zeros(padded, H, dtype=torch.float32)
    # HF BERT order: (word + token_type) + position, then LayerNorm. Adds are exact per element.
    x[:total] = (word[flat] + type0) + pos_emb[pos]
    for r in range(0, padded, tile_rows):
        x[r : r + tile_rows] = torch.layer_norm(x[r : r + tile_rows], [H], emb_lnw, emb_lnb, eps)
    return x


def _attend_per_text(qkv: torch.Tensor, ctx: torch.Tensor, lengths: list[int], heads: int) -> None:
    """Attention of each text over its own packed rows only, written into ``ctx``."""
    H = ctx.shape[1]
    hd = H // heads
    s = 0
    for n in lengths:
        # (3, 1, heads, n, hd) views into this text's packed rows only; the 4-D call takes
        # torch's fused CPU attention kernel
        blk = qkv[s : s + n].view(1, n, 3, heads, hd).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(blk[0], blk[1], blk[2])
        ctx[s : s + n] = o[0].transpose(0, 1).reshape(n, H)
        s += n


def _mean_pool(x: torch.Tensor, lengths: list[int], spans: list[int]) -> torch.Tensor:
    """Each text's mean over its rows, L2-normalised (fp32), then the same over each span: ``spans``
    holds (start, end) pairs of packed rows (a sentence's word pieces inside its text)."""
    emb = torch.empty(len(lengths) + len(spans) // 2, x.shape[1], dtype=torch.float32)
    s = 0
    for i, n in enumerate(lengths):
        v = x[s : s + n].sum(0) / n
        emb[i] = v / v.norm().clamp_min(1e-12)
        s += n
    for j in range(len(spans) // 2):
        a, b = spans[2 * j], spans[2 * j + 1]
        v = x[a:b].sum(0) / (b - a)
        emb[len(lengths) + j] = v / v.norm().clamp_min(1e-12)
    return emb


def _packed_forward(
    flat: torch.Tensor,
    pos: torch.Tensor,
    lengths: list[int],
    tile_rows: int,
    word: torch.Tensor,
    pos_emb: torch.Tensor,
    type0: torch.Tensor,
    emb_lnw: torch.Tensor,
    emb_lnb: torch.Tensor,
    layers: list[list[torch.Tensor]],
    heads: int,
    eps: float,
    bf16: bool,
    spans: list[int],
) -> torch.Tensor:
    """The packed forward pass: input embeddings, the encoder layers, mean pooling (of each text,
    then of each span in ``spans``: see :func:`_mean_pool`).

    ``bf16`` picks the layer body (:func:`_layers_bf16`, else :func:`_layers_fp32`); the embedding
    and pooling around it are the same for both. Written in the TorchScript subset so it runs
    without the GIL (see the module docstring).
    """
    total = 0
    for n in lengths:
        total += n
    padded = (total + tile_rows - 1) // tile_rows * tile_rows
    x = _embed_packed(flat, pos, total, padded, word, pos_emb, type0, emb_lnw, emb_lnb, tile_rows, eps)
    if bf16:
        _layers_bf16(x, lengths, tile_rows, layers, heads, eps)
    else:
        _layers_fp32(x, lengths, tile_rows, layers, heads, eps)
    return _mean_pool(x, lengths, spans)


def _layers_fp32(
    x: torch.Tensor, lengths: list[int], tile_rows: int, layers: list[list[torch.Tensor]], heads: int, eps: float
) -> None:
    """The fp32 encoder layers over the packed rows ``x`` (in place), op for op the same as
    ``PackedMiniLMEmbedder._forward_eager``.

    ``layers[i]`` = [Wqkv^T, bqkv, Wo^T, bo, ln1w, ln1b, Wi^T, bi, bo2, ln2w, ln2b, *Wo2^T K-chunks].
    """
    padded, H = x.shape[0], x.shape[1]
    qkv = torch.empty(padded, 3 * H, dtype=torch.float32)
    ctx = torch.zeros(padded, H, dtype=torch.float32)
    inter = layers[0][6].shape[1]
    buf_o = torch.empty(tile_rows, H, dtype=torch.float32)
    buf_i = torch.empty(tile_rows, inter, dtype=torch.float32)
    buf_h = torch.empty(tile_rows, inter, dtype=torch.float32)
    for layer in layers:
        for r in range(0, padded, tile_rows):
            torch.addmm(layer[1], x[r : r + tile_rows], layer[0], out=qkv[r : r + tile_rows])
        _attend_per_text(qkv, ctx, lengths, heads)
        for r in range(0, padded, tile_rows):
            torch.addmm(layer[3], ctx[r : r + tile_rows], layer[2], out=buf_o)
            a = torch.layer_norm(buf_o.add_(x[r : r + tile_rows]), [H], layer[4], layer[5], eps)
            torch.addmm(layer[7], a, layer[6], out=buf_i)
            torch.ops.aten.gelu(buf_i, out=buf_h)
            k = 0
            for c in range(11, len(layer)):  # _linear_kchunked, inlined
                w = layer[c]
                part = buf_h[:, k : k + w.shape[0]]
                if c == 11:
                    torch.addmm(layer[8], part, w, out=buf_o)
                else:
                    buf_o.addmm_(part, w)
                k += w.shape[0]
            x[r : r + tile_rows] = torch.layer_norm(buf_o.add_(a), [H], layer[9], layer[10], eps)


def _layers_bf16(
    x: torch.Tensor, lengths: list[int], tile_rows: int, layers: list[list[torch.Tensor]], heads: int, eps: float
) -> None:
    """The ``packed-bf16`` layers (the default where the CPU has native bf16): the same structure
    (packed rows, fixed tiles, per-text attention), with the four dense layers as oneDNN bf16 GEMMs
    on prepacked weights (AMX / AVX-512 BF16: fp32 accumulation, bf16 outputs), GELU fused into the
    intermediate layer and attention on the bf16 q/k/v. The residual stream, LayerNorms, pooling
    and normalisation stay fp32.

    ``layers[i]`` = [Wqkv, bqkv, Wo, bo, ln1w, ln1b, Wi, bi, Wo2, bo2, ln2w, ln2b], weights prepacked.
    The bits are a function of the text alone here too (fixed shapes per lane; measured invariant
    to the batch, the thread count and the process), but they are not the fp32 pass's bits.
    """
    padded, H = x.shape[0], x.shape[1]
    qkv = torch.empty(padded, 3 * H, dtype=torch.bfloat16)
    ctx = torch.zeros(padded, H, dtype=torch.bfloat16)
    for layer in layers:
        for r in range(0, padded, tile_rows):
            qkv[r : r + tile_rows] = torch.ops.mkldnn._linear_pointwise(
                x[r : r + tile_rows].to(torch.bfloat16), layer[0], layer[1], "none", [], ""
            )
        _attend_per_text(qkv, ctx, lengths, heads)
        for r in range(0, padded, tile_rows):
            o1 = torch.ops.mkldnn._linear_pointwise(ctx[r : r + tile_rows], layer[2], layer[3], "none", [], "")
            a = torch.layer_norm(o1.float().add_(x[r : r + tile_rows]), [H], layer[4], layer[5], eps)
            h = torch.ops.mkldnn._linear_pointwise(a.to(torch.bfloat16), layer[6], layer[7], "gelu", [], "none")
            o2 = torch.ops.mkldnn._linear_pointwise(h, layer[8], layer[9], "none", [], "")
            x[r : r + tile_rows] = torch.layer_norm(o2.float().add_(a), [H], layer[10], layer[11], eps)


_SCRIPTED: dict = {}  # python function -> compiled function (or None), filled on first use
_SCRIPT_LOCK = threading.Lock()


def _renew_script_lock_in_child() -> None:
    """A fork while a thread compiles would leave the lock held in the child; the child compiles anew."""
    global _SCRIPT_LOCK
    _SCRIPT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_script_lock_in_child)


def _scripted_forward(fn=_packed_forward):
    """The TorchScript-compiled ``fn``, or None where TorchScript is unavailable."""
    with _SCRIPT_LOCK:
        if fn not in _SCRIPTED:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # torch.jit.script is marked deprecated in torch 2.x
                    _SCRIPTED[fn] = torch.jit.script(fn)
            except Exception as exc:  # a torch without TorchScript: the eager path, same bits
                log.debug("groundlens: TorchScript unavailable, using the eager forward: %s", exc)
                _SCRIPTED[fn] = None
        return _SCRIPTED[fn]


def bf16_supported() -> bool:
    """Whether this CPU runs oneDNN bf16 GEMMs natively (AVX-512 BF16 / AMX); elsewhere they are
    emulated and slower than fp32, so ``packed-bf16`` refuses to load."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return False


def _k_chunks(weight: torch.Tensor) -> list[torch.Tensor]:
    """``weight.T`` (in, out) cut along ``in`` into contiguous blocks of at most K_CHUNK rows."""
    wt = weight.t()
    return [wt[k : k + K_CHUNK].contiguous() for k in range(0, wt.shape[0], K_CHUNK)]


def _linear_kchunked(
    x: torch.Tensor, w_t_chunks: list[torch.Tensor], bias: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``x @ W.T + bias`` with the inner dimension cut into fixed chunks, summed in fixed order.

    Measured with MKL 2024.2: a (128, 1536) x (1536, 384) GEMM gives different bits with 1 thread
    than with 2+ threads (the library splits the long reduction differently), while every GEMM with
    K <= 768 was identical for 1, 2, 3, 4 and 8 threads. Chunking keeps results thread-count
    independent at a ~2% cost. ``out`` (a reused buffer) gives the same bits as a fresh tensor.
    """
    k = 0
    for i, w in enumerate(w_t_chunks):
        part = x[:, k : k + w.shape[0]]
        if i == 0:
            out = torch.addmm(bias, part, w, out=out) if out is not None else torch.addmm(bias, part, w)
        else:
            assert out is not None  # set by the first chunk
            out.addmm_(part, w)
        k += w.shape[0]
    assert out is not None
    return out


def _check_precision(precision: str) -> None:
    """Refuse an unknown precision, and bf16 where the CPU would only emulate it (slower than fp32)."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
    if precision == "bf16" and not bf16_supported():
        raise GroundlensInputError(
            "the packed-bf16 backend needs a CPU with native bf16 (AVX-512 BF16 or AMX) "
            "and torch built with oneDNN; use the fp32 packed-torch backend instead "
            '(GROUNDLENS_BACKEND=packed-torch, or backend="packed-torch" in get_embedder() / score_dataset())'
        )


_LayerTensors = tuple[
    torch.Tensor,  # wqkv: query, key and value weights stacked (out, in)
    torch.Tensor,  # bqkv
    torch.Tensor,  # attention output dense weight
    torch.Tensor,  # ... and bias
    torch.Tensor,  # attention LayerNorm weight
    torch.Tensor,  # ... and bias
    torch.Tensor,  # intermediate dense weight
    torch.Tensor,  # ... and bias
    list[torch.Tensor],  # output dense weight as K-chunks of its transpose
    torch.Tensor,  # output dense bias
    torch.Tensor,  # output LayerNorm weight
    torch.Tensor,  # ... and bias
]


def _layer_tensors(g: Callable[[str], torch.Tensor], p: str) -> _LayerTensors:
    """One encoder layer's tensors (``g`` reads a model tensor by name, ``p`` is the layer's prefix),
    with q, k and v fused into one product."""
    wqkv = torch.cat([g(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")], 0)
    bqkv = torch.cat([g(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")], 0)
    return (
        wqkv.contiguous(),
        bqkv.contiguous(),
        g(p + "attention.output.dense.weight"),
        g(p + "attention.output.dense.bias"),
        g(p + "attention.output.LayerNorm.weight"),
        g(p + "attention.output.LayerNorm.bias"),
        g(p + "intermediate.dense.weight"),
        g(p + "intermediate.dense.bias"),
        _k_chunks(g(p + "output.dense.weight")),
        g(p + "output.dense.bias"),
        g(p + "output.LayerNorm.weight"),
        g(p + "output.LayerNorm.bias"),
    )


def _bf16_layers(layers: list[_LayerTensors]) -> list[list[torch.Tensor]]:
    """The ``packed-bf16`` pass's layers (see :func:`_layers_bf16`): dense weights in oneDNN's
    prepacked bf16 layout and their biases in bf16, the LayerNorms left fp32."""

    def pack(weight: torch.Tensor) -> torch.Tensor:  # (out, in) -> oneDNN's blocked bf16 layout
        return torch.ops.mkldnn._reorder_linear_weight(weight.to(torch.bfloat16).contiguous(), TILE)

    return [
        [
            pack(wqkv),
            bqkv.bfloat16(),
            pack(wo),
            bo.bfloat16(),
            ln1w,
            ln1b,
            pack(wi),
            bi.bfloat16(),
            pack(torch.cat(list(wo2), 0).t()),
            bo2.bfloat16(),
            ln2w,
            ln2b,
        ]
        for wqkv, bqkv, wo, bo, ln1w, ln1b, wi, bi, wo2, bo2, ln2w, ln2b in layers
    ]


class PackedMiniLMEmbedder(SpanPassEmbedder):
    """Sentence-transformers' BERT + mean pooling + normalise, computed batch-invariantly."""

    backend = "packed-torch"

    def __init__(self, model_path: pathlib.Path, model_id: str, precision: str = "fp32"):
        _check_precision(precision)
        path = pathlib.Path(model_path)
        self.model_id = model_id
        self.precision = precision
        if precision == "bf16":
            self.backend = "packed-bf16"
        self._path = path
        self._fingerprint: str | None = None
        self._lock = first_load.own_lock(self)  # renewed in a forked child
        self._read_config(path)
        self._load_weights(path)
        self._script_layers = [
            [wqkv.t(), bqkv, wo.t(), bo, ln1w, ln1b, wi.t(), bi, bo2, ln2w, ln2b, *wo2]
            for wqkv, bqkv, wo, bo, ln1w, ln1b, wi, bi, wo2, bo2, ln2w, ln2b in self._layers
        ]
        self.use_script = True  # False: the eager reference path (same bits, holds the GIL per op)
        if precision == "bf16":
            self._bf16_layers = _bf16_layers(self._layers)

    def _read_config(self, path: pathlib.Path) -> None:
        """The encoder's dimensions, the token window and the tokenizer, refusing the BERT variants the packed
        pass does not compute (another activation, relative positions)."""
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
        act = cfg.get("hidden_act", "gelu")
        if act != "gelu":
            raise ValueError(f"packed backend supports hidden_act 'gelu' (exact erf), got {act!r}")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("packed backend supports absolute position embeddings only")
        self._layers_n = int(cfg["num_hidden_layers"])
        self._heads = int(cfg["num_attention_heads"])
        self.dim = int(cfg["hidden_size"])
        self._head_dim = self.dim // self._heads
        self._eps = float(cfg.get("layer_norm_eps", 1e-12))
        self._read_window(path, cfg)

    def _load_weights(self, path: pathlib.Path) -> None:
        """The embedding tables and each layer's tensors as contiguous fp32 copies, so the loaded
        file can be dropped; the output dense weight is kept as K-chunks (see ``_k_chunks``)."""
        w = load_file(str(path / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def g(name: str) -> torch.Tensor:
            return w[prefix + name].to(torch.float32).contiguous()

        self._word = g("embeddings.word_embeddings.weight")
        self._pos = g("embeddings.position_embeddings.weight")
        self._type0 = g("embeddings.token_type_embeddings.weight")[0].clone()
        self._emb_ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        self._layers = [_layer_tensors(g, f"encoder.layer.{i}.") for i in range(self._layers_n)]
        w.clear()  # drop the loaded tensors; the layers hold their own copies

    # ------------------------------------------------------------------ identity
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from groundlens_core.embedding.resolve import fingerprint_for

            self._fingerprint = fingerprint_for(self.model_id, self._path)
            if self.precision == "bf16":  # other bits than the fp32 pass: calibrations must not mix them
                self._fingerprint += "+bf16"
        return self._fingerprint

    # ------------------------------------------------------------------ encode
    def encode_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each text's row and, from the same pass, a row per character span of it (a sentence:
        the normalised mean of its word pieces' last hidden states, see ``token_range``).

        Why from the same pass: the sentence evidence aligns each response sentence with a context
        sentence; pooling them out of the whole texts' pass costs no model work beyond the texts."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), []
        unique: dict[str, int] = {}
        order = [unique.setdefault(t, len(unique)) for t in texts]
        uniq = list(unique)
        encs = [self._tok.encode(t, add_special_tokens=True) for t in uniq]
        ids = [e.ids for e in encs]
        for t, e in zip(uniq, ids):
            check_fits(t, e, self._max_seq)
        # token spans per unique text (a text asked twice with other spans gets all of them)
        tok_spans: list[dict[tuple[int, int], tuple[int, int]]] = [{} for _ in uniq]
        for t, sp in zip(texts, spans):
            k = unique[t]
            for a, b in sp:
                if (a, b) not in tok_spans[k]:
                    tok_spans[k][(a, b)] = token_range(encs[k].offsets, a, b)
        out = np.empty((len(uniq), self.dim), dtype=np.float32)
        span_out: list[np.ndarray] = [np.empty((len(s), self.dim), dtype=np.float32) for s in tok_spans]
        # Lanes: a text's tile size is a function of its own length only, so short texts encoded
        # alone do not pay for a full TILE of rows, and the result is still batch invariant.
        lanes: dict[int, list[int]] = {}
        for k, e in enumerate(ids):
            lane = TINY_TILE if len(e) <= TINY_TILE else SMALL_TILE if len(e) <= SMALL_TILE else TILE
            lanes.setdefault(lane, []).append(k)
        # groups of up to GROUP_TOKENS packed tokens (at least one text per group); with encode
        # lanes (see lanes.py) smaller groups, so the lanes can share them out
        cap = GROUP_TOKENS if current_lanes() <= 1 else LANE_JOB_TOKENS
        groups: list[tuple[list[int], int]] = []
        for tile, members in lanes.items():
            start, acc = 0, 0
            for j, k in enumerate(members + [-1]):
                n = len(ids[k]) if k >= 0 else 0
                if k < 0 or (j > start and acc + n > cap):
                    groups.append((members[start:j], tile))
                    start, acc = j, 0
                acc += n

        def job(chunk: list[int], tile: int) -> Callable[[], np.ndarray]:
            flat_spans: list[int] = []
            row = 0
            for i in chunk:
                for a, b in tok_spans[i].values():
                    flat_spans += [row + a, row + b]
                row += len(ids[i])

            def run() -> np.ndarray:
                with torch.inference_mode():  # a per-thread mode: set on whichever lane runs this
                    return self._forward([ids[i] for i in chunk], tile, flat_spans).numpy()

            return run

        with self._lock:
            for (chunk, _), rows in zip(groups, run_jobs([job(c, t) for c, t in groups])):
                out[chunk] = rows[: len(chunk)]
                s = len(chunk)
                for i in chunk:
                    span_out[i][:] = rows[s : s + len(tok_spans[i])]
                    s += len(tok_spans[i])
        where = [{ab: j for j, ab in enumerate(s)} for s in tok_spans]
        picked = [span_out[unique[t]][[where[unique[t]][ab] for ab in sp]] for t, sp in zip(texts, spans)]
        if len(uniq) == len(texts):
            return out, picked
        return out[np.asarray(order, dtype=np.intp)], picked

    def _forward(self, ids: list[list[int]], tile_rows: int, spans: list[int] | None = None) -> torch.Tensor:
        spans = spans or []
        if self.precision == "bf16":
            fn, layers = _scripted_forward() or _packed_forward, self._bf16_layers
        else:
            fn, layers = (_scripted_forward() if self.use_script else None), self._script_layers
            if fn is None:
                return self._forward_eager(ids, tile_rows, spans)
        lengths = [len(e) for e in ids]
        flat = torch.tensor([t for e in ids for t in e], dtype=torch.long)
        pos = torch.cat([torch.arange(n, dtype=torch.long) for n in lengths])
        # the optimizer off (a per-thread setting): the graph runs exactly as written, no fusion
        with torch.jit.optimized_execution(False):
            return fn(
                flat,
                pos,
                lengths,
                tile_rows,
                self._word,
                self._pos,
                self._type0,
                self._emb_ln[0],
                self._emb_ln[1],
                layers,
                self._heads,
                self._eps,
                self.precision == "bf16",
                spans,
            )

    def _forward_eager(self, ids: list[list[int]], tile_rows: int, pool_spans: list[int] | None = None) -> torch.Tensor:
        lengths = [len(e) for e in ids]
        total = sum(lengths)
        padded = -(-total // tile_rows) * tile_rows
        tiles = [slice(r, r + tile_rows) for r in range(0, padded, tile_rows)]
        spans = []
        r = 0
        for n in lengths:
            spans.append((r, n))
            r += n
        H, nh, hd, eps = self.dim, self._heads, self._head_dim, self._eps

        flat = torch.tensor([t for e in ids for t in e], dtype=torch.long)
        pos = torch.cat([torch.arange(n, dtype=torch.long) for n in lengths])
        x = torch.zeros(padded, H, dtype=torch.float32)
        # HF BERT order: (word + token_type) + position, then LayerNorm. Adds are exact per element.
        x[:total] = (self._word[flat] + self._type0) + self._pos[pos]
        lnw, lnb = self._emb_ln
        for t in tiles:
            x[t] = F.layer_norm(x[t], (H,), lnw, lnb, eps)

        qkv = torch.empty(padded, 3 * H, dtype=torch.float32)
        ctx = torch.zeros(padded, H, dtype=torch.float32)
        inter = self._layers[0][6].shape[0]  # intermediate size
        buf_o = torch.empty(tile_rows, H, dtype=torch.float32)
        buf_i = torch.empty(tile_rows, inter, dtype=torch.float32)
        buf_h = torch.empty(tile_rows, inter, dtype=torch.float32)
        for wqkv, bqkv, wo, bo, ln1w, ln1b, wi, bi, wo2, bo2, ln2w, ln2b in self._layers:
            wqkv_t = wqkv.t()
            for t in tiles:
                torch.addmm(bqkv, x[t], wqkv_t, out=qkv[t])
            for s, n in spans:
                # (3, 1, heads, n, hd) views into the packed rows of this text only; the 4-D
                # call takes torch's fused CPU attention kernel (the 3-D one falls back to math).
                blk = qkv[s : s + n].view(1, n, 3, nh, hd).permute(2, 0, 3, 1, 4)
                o = F.scaled_dot_product_attention(blk[0], blk[1], blk[2])  # (1, heads, n, hd)
                ctx[s : s + n] = o[0].transpose(0, 1).reshape(n, H)
            wo_t, wi_t = wo.t(), wi.t()
            for t in tiles:
                # the same operations as F.linear / F.gelu / "+", written into reused buffers: a
                # fresh 0.2-0.8 MB tensor per tile makes glibc map and unmap memory, and the page
                # faults and TLB flushes that follow slow the agent's threads down too
                torch.addmm(bo, ctx[t], wo_t, out=buf_o)
                a = F.layer_norm(buf_o.add_(x[t]), (H,), ln1w, ln1b, eps)
                torch.addmm(bi, a, wi_t, out=buf_i)
                torch._C._nn.gelu(buf_i, out=buf_h)  # type: ignore[call-arg]  # the stub lacks out=
                x[t] = F.layer_norm(_linear_kchunked(buf_h, wo2, bo2, out=buf_o).add_(a), (H,), ln2w, ln2b, eps)

        return _mean_pool(x, lengths, pool_spans or [])
