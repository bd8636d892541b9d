"""Count and split texts by word pieces, so that no long text is silently truncated."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer

from groundlens_core.errors import GroundlensInputError

_SENTENCE_CUT_WINDOW = 0.2  # prefer a sentence end within the last 20% of a split window


def model_window(model_dir: Path, config: Mapping[str, Any]) -> int:
    """Word pieces a text may have, [CLS] and [SEP] included: the sentence-transformers window
    (``max_seq_length``, 256 when the model does not say) within the model's positions, so every
    backend refuses the same texts as sentence-transformers would truncate."""
    st_cfg_file = model_dir / "sentence_bert_config.json"
    max_seq = 256
    if st_cfg_file.is_file():
        max_seq = int(json.loads(st_cfg_file.read_text(encoding="utf-8")).get("max_seq_length", max_seq))
    return min(max_seq, int(config.get("max_position_embeddings", 512)))


def untruncated_tokenizer(tokenizer_json: Path) -> Tokenizer:
    """The model's tokenizer with truncation and padding off: a text too long for the window is
    refused (or split by the caller), never silently cut, and no text is padded."""
    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_truncation()
    tok.no_padding()
    return tok


def check_fits(text: str, ids: Sequence[int], max_seq: int) -> None:
    """Refuse a text whose word pieces (with [CLS] and [SEP]) overflow the model's window: every
    backend refuses it alike, so the caller learns to ``split()`` it rather than get a cut text's row."""
    if len(ids) > max_seq:
        raise GroundlensInputError(
            f"text has {len(ids) - 2} word pieces, more than max_tokens={max_seq - 2}; "
            f"split it first with split() (text starts {text[:60]!r})"
        )


class TokenSplitter:
    """Word-piece counting and splitting shared by every backend of a BERT-style model."""

    def __init__(self, tokenizer: Tokenizer, max_tokens: int):
        self._tok = tokenizer
        self.max_tokens = max_tokens

    @classmethod
    def from_file(cls, tokenizer_json: Path, max_tokens: int) -> TokenSplitter:
        return cls(untruncated_tokenizer(tokenizer_json), max_tokens)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_tokens(self, text: str) -> int:
        return self.count(text)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character offsets of each word piece, with [CLS]/[SEP] ((0, 0)) around them."""
        return list(self._tok.encode(text, add_special_tokens=True).offsets)

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
                gap = text[offsets[j - 1][1] : offsets[j][0]]
                prev = text[offsets[j - 1][0] : offsets[j - 1][1]]
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


def token_range(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """The word pieces of characters ``start:end`` of a text: ``(first, last + 1)`` indices into its
    ids *with* [CLS] at 0 and [SEP] last (whose offsets are (0, 0)), for pooling a sentence from
    the whole text's pass. A piece counts when its characters overlap the span; a span with none
    (only characters the tokenizer drops) gets the text's pieces between [CLS] and [SEP]."""
    inner = range(1, len(offsets) - 1)
    hit = [i for i in inner if offsets[i][1] > start and offsets[i][0] < end]
    if hit:
        return hit[0], hit[-1] + 1
    return (1, len(offsets) - 1) if len(offsets) > 2 else (0, len(offsets))


class SpanPassEmbedder:
    """What the backends that pool sentences out of their own pass share: ``encode`` is
    ``encode_spans`` without spans, so a text's row comes from one code path whichever is called,
    and counting and cutting are the splitter's on the same untruncated tokenizer."""

    _max_seq: int
    max_tokens: int
    _tok: Tokenizer
    _splitter: TokenSplitter

    def _read_window(self, model_dir: Path, config: Mapping[str, Any]) -> None:
        """The model's window and its untruncated tokenizer with a splitter on it, so every backend
        refuses, counts and cuts the same texts alike."""
        self._max_seq = model_window(model_dir, config)
        self.max_tokens = self._max_seq - 2
        self._tok = untruncated_tokenizer(model_dir / "tokenizer.json")
        self._splitter = TokenSplitter(self._tok, self.max_tokens)

    def encode_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        raise NotImplementedError

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings, not a string")
        return self.encode_spans(texts, [() for _ in texts])[0]

    def count_tokens(self, text: str) -> int:
        return self._splitter.count(text)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        return self._splitter.split(text, max_tokens)
