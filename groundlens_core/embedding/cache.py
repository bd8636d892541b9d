"""A bounded, thread-safe LRU of text embeddings in front of any backend.

Agent runs repeat the same question and context on every LLM call of a run; batches repeat
questions across rows. Embeddings are batch invariant, so a cached row is exactly what a fresh
encode would give and caching never changes a score.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from groundlens_core.embedding import first_load
from groundlens_core.embedding.base import Embedder
from groundlens_core.errors import EmbeddingError


class CachedEmbedder:
    def __init__(self, inner: Embedder, max_entries: int = 4096):
        self.inner = inner
        self.max_entries = max_entries
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = first_load.own_lock(self)  # renewed in a forked child
        self.hits = 0
        self.misses = 0

    # protocol attributes, delegated
    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def backend(self) -> str:
        return self.inner.backend

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        return self.inner.split(text, max_tokens)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Rows for ``texts`` in order; each distinct uncached text is encoded once, all together."""
        texts = list(texts)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for t in texts:
                if t in found:
                    continue
                row = self._cache.get(t)
                if row is not None:
                    self._cache.move_to_end(t)
                    found[t] = row
                    self.hits += 1
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            self.misses += len(missing)
            fresh = np.asarray(self.inner.encode(missing), dtype=np.float32)
            if fresh.shape != (len(missing), self.dim):
                raise EmbeddingError(f"embedder returned shape {fresh.shape}, expected {(len(missing), self.dim)}")
            if not np.isfinite(fresh).all():
                bad = [missing[i][:40] for i in np.where(~np.isfinite(fresh).all(axis=1))[0]]
                raise EmbeddingError(f"embedder returned non-finite values for {len(bad)} text(s), e.g. {bad[0]!r}")
            with self._lock:
                for t, row in zip(missing, fresh):
                    row = row.copy()
                    row.setflags(write=False)
                    found[t] = row
                    self._cache[t] = row
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])
