"""Reference backend: sentence-transformers, one text per forward pass.

Each text is encoded alone (no padding, no batch neighbours): torch CPU kernels give a text a
slightly different embedding (about 2e-7) inside a padded batch, and we promise byte-identical
scores. This backend is the yardstick the faster packed backend is checked against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from groundlens_core.embedding import first_load
from groundlens_core.embedding.resolve import fingerprint_for
from groundlens_core.embedding.tokens import TokenSplitter, token_range


class SentenceTransformerEmbedder:
    backend = "sentence-transformers"

    def __init__(self, model_path: Path, model_id: str):
        from sentence_transformers import SentenceTransformer

        self._path = Path(model_path)
        self.model_id = model_id
        self._model = SentenceTransformer(str(self._path), device="cpu", local_files_only=True)
        self.dim = int(self._model.get_sentence_embedding_dimension() or 0)
        self.max_tokens = int(self._model.max_seq_length or 0) - 2
        self._splitter = TokenSplitter.from_file(self._path / "tokenizer.json", self.max_tokens)
        self._lock = first_load.own_lock(self)  # renewed in a forked child
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint_for(self.model_id, self._path)
        return self._fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            for i, text in enumerate(texts):
                if self._splitter.count(text) > self.max_tokens:
                    raise ValueError(
                        f"text of {self._splitter.count(text)} word pieces exceeds {self.max_tokens}; split it first"
                    )
                out[i] = self._model.encode([text], convert_to_numpy=True, show_progress_bar=False)[0]
        return out

    def encode_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each text's row and a row per character span of it: the normalised mean of the span's
        token embeddings from the text's own forward pass (see ``PackedMiniLMEmbedder.encode_spans``)."""
        from groundlens_core.embedding.onnx_backend import mean_pool

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        picked: list[np.ndarray] = []
        with self._lock:
            for i, (text, sp) in enumerate(zip(texts, spans)):
                if self._splitter.count(text) > self.max_tokens:
                    raise ValueError(
                        f"text of {self._splitter.count(text)} word pieces exceeds {self.max_tokens}; split it first"
                    )
                encoded: Any = self._model.encode(
                    [text], output_value=None, convert_to_numpy=True, show_progress_bar=False
                )
                res = encoded[0]
                out[i] = np.asarray(res["sentence_embedding"], dtype=np.float32)
                states = np.asarray(res["token_embeddings"], dtype=np.float32)
                offsets = self._splitter.offsets(text)
                picked.append(
                    np.stack([mean_pool(states, *token_range(offsets, a, b)) for a, b in sp])
                    if sp
                    else np.zeros((0, self.dim), dtype=np.float32)
                )
        return out, picked

    def count_tokens(self, text: str) -> int:
        return self._splitter.count(text)

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        return self._splitter.split(text, max_tokens)
