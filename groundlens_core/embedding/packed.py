"""An exact, batch-invariant BERT sentence embedder in plain torch (no transformers import).

Why: sentence-transformers pads a batch to its longest text and lets the GEMM kernels see a
row count that depends on the batch, so a text's embedding moves by ~1e-7 with its company. Our
scores are promised byte-identical whether a text is scored alone, in a batch, or in another
process, so this backend makes every floating-point operation a function of the text alone:

* all texts of a call are tokenized and their tokens *packed* into one ``(T, hidden)`` matrix,
  without padding between texts;
* every row-wise stage (linear layers, LayerNorm, GELU) runs over fixed-size row tiles of exactly
  ``TILE`` rows (the last tile zero-padded), so each kernel call has one shape whatever the batch;
* attention, mean pooling and L2 normalisation run per text on its own exact-length slice.

A text encoded alone goes through the very same path, hence bit-identical rows. Results depend on
the machine (CPU instruction set) and on torch's thread count, like any float computation; within
one machine and configuration they are reproducible across processes.
"""

from __future__ import annotations

import json
import math
import pathlib
import threading
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer

from groundlens_core.errors import GroundlensInputError

TILE = 128  # rows per kernel call; every linear/LayerNorm/GELU call sees exactly (TILE, k)
GROUP_TOKENS = 8192  # packed tokens per forward pass (bounds memory; does not change results)
_SENTENCE_CUT_WINDOW = 0.2  # prefer a sentence end within the last 20% of a split window


class PackedMiniLMEmbedder:
    """Sentence-transformers' BERT + mean pooling + normalise, computed batch-invariantly."""

    backend = "packed-torch"

    def __init__(self, model_path: pathlib.Path, model_id: str):
        path = pathlib.Path(model_path)
        self.model_id = model_id
        self._path = path
        self._fingerprint: str | None = None
        self._lock = threading.Lock()

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
        max_pos = int(cfg.get("max_position_embeddings", 512))

        st_cfg_file = path / "sentence_bert_config.json"
        max_seq = 256
        if st_cfg_file.is_file():
            max_seq = int(json.loads(st_cfg_file.read_text(encoding="utf-8")).get("max_seq_length", max_seq))
        self._max_seq = min(max_seq, max_pos)
        self.max_tokens = self._max_seq - 2

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok

        w = load_file(str(path / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def g(name: str) -> torch.Tensor:
            return w[prefix + name].to(torch.float32).contiguous()

        self._word = g("embeddings.word_embeddings.weight")
        self._pos = g("embeddings.position_embeddings.weight")
        self._type0 = g("embeddings.token_type_embeddings.weight")[0].clone()
        self._emb_ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        self._layers = []
        for i in range(self._layers_n):
            p = f"encoder.layer.{i}."
            wqkv = torch.cat([g(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")], 0)
            bqkv = torch.cat([g(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")], 0)
            self._layers.append(
                (
                    wqkv.contiguous(), bqkv.contiguous(),
                    g(p + "attention.output.dense.weight"), g(p + "attention.output.dense.bias"),
                    g(p + "attention.output.LayerNorm.weight"), g(p + "attention.output.LayerNorm.bias"),
                    g(p + "intermediate.dense.weight"), g(p + "intermediate.dense.bias"),
                    g(p + "output.dense.weight"), g(p + "output.dense.bias"),
                    g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias"),
                )
            )
        del w

    # ------------------------------------------------------------------ identity
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from groundlens_core.embedding.resolve import fingerprint_for

            self._fingerprint = fingerprint_for(self.model_id, self._path)
        return self._fingerprint

    # ------------------------------------------------------------------ tokens
    def count_tokens(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        limit = self.max_tokens if max_tokens is None else int(max_tokens)
        if limit < 1:
            raise ValueError("max_tokens must be at least 1")
        enc = self._tok.encode(text, add_special_tokens=False)
        n = len(enc.ids)
        if n <= limit:
            return [text]
        offsets = enc.offsets
        tokens = enc.tokens
        # A cut "before token j" keeps WordPiece words whole when token j starts a new word.
        starts_word = [not t.startswith("##") for t in tokens]
        pieces: list[str] = []
        begin_tok = 0
        begin_char = 0
        while n - begin_tok > limit:
            hi = begin_tok + limit  # cut before token hi at the latest
            lo = max(begin_tok + 1, hi - max(1, int(math.ceil(limit * _SENTENCE_CUT_WINDOW))))
            cut = None
            for j in range(hi, lo - 1, -1):  # a sentence end in the last ~20% of the window
                gap = text[offsets[j - 1][1]:offsets[j][0]]
                prev = text[offsets[j - 1][0]:offsets[j - 1][1]]
                if "\n" in gap or (prev in (".", "!", "?") and gap[:1].isspace()):
                    cut = j
                    break
            if cut is None:  # else the last word boundary in the window
                for j in range(hi, begin_tok, -1):
                    if starts_word[j]:
                        cut = j
                        break
            if cut is None:  # a single word longer than the window: cut inside it
                cut = hi
            end_char = offsets[cut][0]
            piece = text[begin_char:end_char].rstrip()
            pieces.append(piece if piece else text[begin_char:end_char])
            begin_tok, begin_char = cut, end_char
        pieces.append(text[begin_char:])
        # Re-tokenizing a piece can (rarely, e.g. after a cut inside a word) give more word
        # pieces than its share of the whole; split such a piece again.
        out: list[str] = []
        for piece in pieces:
            if self.count_tokens(piece) > limit:
                out.extend(self._split_hard(piece, limit))
            else:
                out.append(piece)
        return out

    def _split_hard(self, text: str, limit: int) -> list[str]:
        """Fallback for pieces that re-tokenize longer: shrink the window until they fit."""
        enc = self._tok.encode(text, add_special_tokens=False)
        offsets = enc.offsets
        out: list[str] = []
        i, begin_char = 0, 0
        while i < len(offsets):
            step = min(limit, len(offsets) - i)
            while True:
                j = i + step
                end_char = offsets[j][0] if j < len(offsets) else len(text)
                piece = text[begin_char:end_char]
                if step == 1 or self.count_tokens(piece) <= limit:
                    break
                step -= 1
            out.append(piece)
            i, begin_char = i + step, end_char
        return out

    # ------------------------------------------------------------------ encode
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings, not a string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        unique: dict[str, int] = {}
        order = [unique.setdefault(t, len(unique)) for t in texts]
        uniq = list(unique)
        encs = self._tok.encode_batch(uniq, add_special_tokens=True)
        ids = [e.ids for e in encs]
        for t, e in zip(uniq, ids):
            if len(e) > self._max_seq:
                raise GroundlensInputError(
                    f"text has {len(e) - 2} word pieces, more than max_tokens={self.max_tokens}; "
                    f"split it first with split() (text starts {t[:60]!r})"
                )
        out = np.empty((len(uniq), self.dim), dtype=np.float32)
        # Group consecutive texts up to GROUP_TOKENS packed tokens (at least one text per group).
        groups: list[tuple[int, int]] = []
        start, acc = 0, 0
        for k, e in enumerate(ids):
            if k > start and acc + len(e) > GROUP_TOKENS:
                groups.append((start, k))
                start, acc = k, 0
            acc += len(e)
        groups.append((start, len(ids)))
        with self._lock, torch.inference_mode():
            for a, b in groups:
                out[a:b] = self._forward(ids[a:b]).numpy()
        if len(uniq) == len(texts):
            return out
        return out[np.asarray(order, dtype=np.intp)]

    def _forward(self, ids: list[list[int]]) -> torch.Tensor:
        lengths = [len(e) for e in ids]
        total = sum(lengths)
        padded = -(-total // TILE) * TILE
        tiles = [slice(r, r + TILE) for r in range(0, padded, TILE)]
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
        for wqkv, bqkv, wo, bo, ln1w, ln1b, wi, bi, wo2, bo2, ln2w, ln2b in self._layers:
            for t in tiles:
                qkv[t] = F.linear(x[t], wqkv, bqkv)
            for s, n in spans:
                blk = qkv[s:s + n].view(n, 3, nh, hd).permute(1, 2, 0, 3)  # (3, heads, n, hd)
                o = F.scaled_dot_product_attention(blk[0], blk[1], blk[2])  # (heads, n, hd)
                ctx[s:s + n] = o.transpose(0, 1).reshape(n, H)
            for t in tiles:
                a = F.layer_norm(F.linear(ctx[t], wo, bo) + x[t], (H,), ln1w, ln1b, eps)
                h = F.gelu(F.linear(a, wi, bi))
                x[t] = F.layer_norm(F.linear(h, wo2, bo2) + a, (H,), ln2w, ln2b, eps)

        emb = torch.empty(len(ids), H, dtype=torch.float32)
        for k, (s, n) in enumerate(spans):
            v = x[s:s + n].sum(0) / n
            emb[k] = v / v.norm().clamp_min(1e-12)
        return emb
