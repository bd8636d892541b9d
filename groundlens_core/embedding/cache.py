"""A bounded, thread-safe LRU of text embeddings in front of any backend.

Agent runs repeat the same question and context on every LLM call of a run; batches repeat
questions across rows. Embeddings are batch invariant, so a cached row is exactly what a fresh
encode would give and caching never changes a score.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Sequence

import numpy as np

from groundlens_core.embedding import first_load
from groundlens_core.embedding.base import Embedder
from groundlens_core.errors import EmbeddingError

#: a cache key: a text, or (text, start, end) for a span of it
_Key = str | tuple[str, int, int]


def _from_inner(name: str) -> Any:
    """An attribute of the embedder protocol read from the wrapped embedder: the cache stands in for
    it, so what names and sizes the embedding is always the inner one's."""
    return property(lambda self: getattr(self.inner, name), doc=f"The inner embedder's ``{name}``.")


class CachedEmbedder:
    # protocol attributes, delegated
    model_id: str = _from_inner("model_id")
    backend: str = _from_inner("backend")
    dim: int = _from_inner("dim")
    max_tokens: int = _from_inner("max_tokens")
    fingerprint: str = _from_inner("fingerprint")

    def __init__(self, inner: Embedder, max_entries: int = 4096):
        self.inner = inner
        self.max_entries = max_entries
        self._cache: OrderedDict[_Key, np.ndarray] = OrderedDict()
        self._lock = first_load.own_lock(self)  # renewed in a forked child
        self.hits = 0
        self.misses = 0

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        return self.inner.split(text, max_tokens)

    def _keep(self, fresh: Iterable[tuple[_Key, np.ndarray]], found: dict[_Key, np.ndarray]) -> None:
        """Cache freshly encoded rows (and put them in ``found``) as read-only copies, so no caller
        can change the row a later caller gets, then drop the least recently used past the bound."""
        with self._lock:
            for k, row in fresh:
                row = row.copy()
                row.setflags(write=False)
                found[k] = row
                self._cache[k] = row
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Rows for ``texts`` in order; each distinct uncached text is encoded once, all together."""
        texts = list(texts)
        found: dict[_Key, np.ndarray] = {}
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
            self._keep(zip(missing, fresh), found)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])

    def encode_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Rows for ``texts`` and for each character span of each text (``inner.encode_spans``: the
        span pooled from the text's own pass), cached like texts: a context that recurs across
        steps or rows is run once, with its sentences. A backend without ``encode_spans`` (a test
        double) embeds each span's characters as a text of its own."""
        texts = list(texts)
        wanted: dict[str, dict[tuple[int, int], None]] = {}
        for t, sp in zip(texts, spans):
            wanted.setdefault(t, {}).update(dict.fromkeys((int(a), int(b)) for a, b in sp))
        found: dict[_Key, np.ndarray] = {}
        missing: list[str] = []
        with self._lock:
            for t, asked in wanted.items():
                keys: list[_Key] = [t, *((t, a, b) for a, b in asked)]
                cached = [self._cache.get(k) for k in keys]
                if any(r is None for r in cached):
                    missing.append(t)
                    continue
                for k, r in zip(keys, cached):
                    self._cache.move_to_end(k)
                    found[k] = r  # type: ignore[assignment]
                self.hits += 1
        if missing:
            self.misses += len(missing)
            miss_spans = [list(wanted[t]) for t in missing]
            if hasattr(self.inner, "encode_spans"):
                whole, parts = self.inner.encode_spans(missing, miss_spans)
            else:
                whole = self.inner.encode(missing)
                parts = [
                    self.inner.encode([t[a:b] for a, b in sp]) if sp else np.zeros((0, self.dim))
                    for t, sp in zip(missing, miss_spans)
                ]
            fresh: list[tuple[_Key, np.ndarray]] = []
            for t, row, sp, part in zip(missing, np.asarray(whole, dtype=np.float32), miss_spans, parts):
                part = np.asarray(part, dtype=np.float32)
                if row.shape != (self.dim,) or part.shape != (len(sp), self.dim):
                    raise EmbeddingError(
                        f"embedder returned shapes {row.shape} and {part.shape} for a text and its {len(sp)} span(s)"
                    )
                if not (np.isfinite(row).all() and np.isfinite(part).all()):
                    raise EmbeddingError(f"embedder returned non-finite values for a text, e.g. {t[:40]!r}")
                fresh.append((t, row))
                fresh.extend(((t, a, b), r) for (a, b), r in zip(sp, part))
            self._keep(fresh, found)
        out = np.stack([found[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)
        span_rows = [
            np.stack([found[(t, int(a), int(b))] for a, b in sp])
            if len(sp)
            else np.zeros((0, self.dim), dtype=np.float32)
            for t, sp in zip(texts, spans)
        ]
        return out, span_rows
