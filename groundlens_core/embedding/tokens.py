"""Count and split texts by word pieces, so that no long text is silently truncated."""

from __future__ import annotations

import math
from pathlib import Path

from tokenizers import Tokenizer

_SENTENCE_CUT_WINDOW = 0.2  # prefer a sentence end within the last 20% of a split window


class TokenSplitter:
    """Word-piece counting and splitting shared by every backend of a BERT-style model."""

    def __init__(self, tokenizer: Tokenizer, max_tokens: int):
        self._tok = tokenizer
        self.max_tokens = max_tokens

    @classmethod
    def from_file(cls, tokenizer_json: Path, max_tokens: int) -> TokenSplitter:
        tok = Tokenizer.from_file(str(tokenizer_json))
        tok.no_truncation()
        tok.no_padding()
        return cls(tok, max_tokens)

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
