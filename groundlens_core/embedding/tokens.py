"""Count and split texts by word pieces, so that no long text is silently truncated."""

from __future__ import annotations

from pathlib import Path


class TokenSplitter:
    def __init__(self, tokenizer_json: Path, max_tokens: int):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self._tok.no_truncation()
        self._tok.no_padding()
        self.max_tokens = max_tokens

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        """Consecutive spans of at most ``max_tokens`` word pieces, in order.

        A cut prefers a sentence end in the last fifth of the window, else a word boundary; a
        piece that re-tokenises longer than the limit (a word cut in two) is split again.
        """
        limit = max_tokens or self.max_tokens
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= limit:
            return [text] if text.strip() else []
        pieces: list[str] = []
        start = 0
        n = len(offsets)
        while start < n:
            end = min(start + limit, n)
            if end < n:
                end = self._cut_point(text, offsets, start, end, limit)
            char_end = offsets[end][0] if end < n else len(text)
            piece = text[offsets[start][0] : char_end].strip()
            if piece:
                if self.count(piece) > limit:
                    pieces.extend(self.split(piece, max(1, limit - 8)))
                else:
                    pieces.append(piece)
            start = end
        return pieces

    @staticmethod
    def _cut_point(text: str, offsets: list[tuple[int, int]], start: int, end: int, limit: int) -> int:
        floor = start + max(1, int(limit * 0.8))
        for cut in range(end, floor, -1):
            gap = text[offsets[cut - 1][1] : offsets[cut][0]]
            if "\n" in gap or (gap and text[offsets[cut - 1][1] - 1] in ".!?"):
                return cut
        for cut in range(end, start + 1, -1):
            if offsets[cut][0] > offsets[cut - 1][1]:  # whitespace between: a word boundary
                return cut
        return end
