"""The embedder protocol: texts in, a float32 matrix out.

Everything above this layer (SGI, DGI, calibration, the recorder) sees only this protocol, so a
faster backend or a test double can stand in for sentence-transformers without touching the math.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """What groundlens needs from a sentence embedder.

    ``encode`` returns an ``(n, dim)`` float32 array of L2-normalised rows, one per text, in input
    order. Implementations must be *batch invariant*: a text's row must be bit-identical whether it
    is encoded alone or among other texts, in this process or another. Scores derived from it are
    promised byte-identical on that basis.

    ``fingerprint`` names the embedding function (model id + SHA-256 of its weights); it goes into
    every result and every calibration so that a direction made by one model is never applied to
    another.
    """

    model_id: str
    backend: str
    dim: int
    max_tokens: int

    @property
    def fingerprint(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int:
        """Word pieces of ``text`` without the special tokens."""
        ...

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        """Cut ``text`` into consecutive pieces of at most ``max_tokens`` word pieces each."""
        ...
