"""The verifier: a head trained here that reads a response against its context, sentence by sentence.

It decides the band of every response scored with a context (:mod:`groundlens_core.scoring.decision`); the
rule-based findings explain that band and SGI, DGI and support are reported beside it, each as its
method defines it. What it reads and how it was fitted: :mod:`.units`, :mod:`.cross`,
:mod:`.train`; the shipped weights and their manifest (data, hashes, seed, settings, calibration and
the leave-one-file-out table) are ``groundlens_core/data/verifier.safetensors`` and
``verifier.json``.

Opt-in for now: ``GROUNDLENS_VERIFIER=on`` lets it decide; by default the rules decide, because the
shipped weights do not yet rank better than them on the validation data (docs/verifier.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from groundlens_core import settings
from groundlens_core.embedding import first_load
from groundlens_core.errors import GroundlensError
from groundlens_core.scoring.decision import probability_score
from groundlens_core.scoring.results import SentenceVerdict, Verdict

__all__ = ["Verifier", "get_verifier", "probability_score", "WEIGHTS", "MANIFEST"]

WEIGHTS = "verifier.safetensors"
MANIFEST = "verifier.json"
FORMAT = "groundlens-verifier-1"


class VerifierError(GroundlensError):
    """The shipped verifier weights are missing, changed or unreadable."""


@dataclass(frozen=True)
class Verifier:
    """The head, its calibration and its band edges, as shipped."""

    head: Any  # OnnxCross
    a: float  # calibration: P = sigmoid(a * logit + b)
    b: float
    flag_below: float  # probabilities below this are flagged
    trust_from: float  # probabilities at or above this are trusted
    sha256: str

    @property
    def id(self) -> str:
        return f"{FORMAT}:{self.sha256[:12]}"

    @classmethod
    def load(cls, weights: bytes, manifest: dict[str, Any]) -> Verifier:
        from safetensors.numpy import load

        from groundlens_core.embedding.resolve import resolve_model_path, weights_sha256
        from groundlens_core.verifier.cross import OnnxCross

        digest = hashlib.sha256(weights).hexdigest()
        if manifest.get("sha256") != digest:
            raise VerifierError(f"{WEIGHTS} does not match the SHA-256 its manifest gives")
        model_dir = Path(resolve_model_path(None)[0])
        base = manifest.get("base_model_sha256")
        if base and weights_sha256(model_dir) != base:
            raise VerifierError(
                "the verifier was fitted on the packaged all-MiniLM-L6-v2 and GROUNDLENS_MODEL names another "
                "model: unset GROUNDLENS_MODEL or GROUNDLENS_VERIFIER"
            )
        cal = manifest["calibration"]
        return cls(
            head=OnnxCross(load(weights), model_dir, int(manifest["settings"]["layers"])),
            a=float(cal["a"]),
            b=float(cal["b"]),
            flag_below=float(cal["flag_below"]),
            trust_from=float(cal["trust_from"]),
            sha256=digest,
        )

    def probability(self, logit: float) -> float:
        z = self.a * logit + self.b
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def verify(self, embedder: Any, question: str | None, response: str, context: Sequence[str]) -> Verdict:
        """The verdict on ``response`` against the context pieces, each response sentence read
        against the context sentences nearest to it (and to ``question``, when there is one)."""
        from groundlens_core.verifier.states import ModelStates
        from groundlens_core.verifier.units import build_units

        units = build_units(ModelStates(embedder), question, response, context)
        sentences = tuple(
            SentenceVerdict(
                u.sentence.start,
                u.sentence.end,
                round(self.probability(self.head.logit(u.ids, u.type_ids)), 6),
            )
            for u in units
        )
        if not sentences:
            return Verdict(probability=0.5, weakest=None, sentences=(), verifier=self.id, trust_from=self.trust_from)
        weakest = min(range(len(sentences)), key=lambda i: (sentences[i].probability, i))
        return Verdict(
            probability=sentences[weakest].probability,
            weakest=weakest,
            sentences=sentences,
            verifier=self.id,
            trust_from=self.trust_from,
        )


class _Loading:
    """The process-wide verifier, loaded once; its lock is renewed in a forked child."""

    def __init__(self) -> None:
        self._lock = first_load.own_lock(self)
        self.verifier: Verifier | None = None
        self.failed: VerifierError | None = None  # a load that failed is not tried again


_state = _Loading()


def get_verifier() -> Verifier | None:
    """The shipped verifier (loaded once per process) when ``GROUNDLENS_VERIFIER=on``, else None.

    Off by default: on the dev sets it was validated on, the shipped verifier does not yet rank
    better than the rules (docs/verifier.md gives the figures), so the rules decide unless asked."""
    if not settings.flag("GROUNDLENS_VERIFIER", False):
        return None
    with _state._lock:
        if _state.verifier is None:
            if _state.failed is not None:
                raise _state.failed
            data = resources.files("groundlens_core.data")
            try:
                weights = data.joinpath(WEIGHTS).read_bytes()
                manifest = json.loads(data.joinpath(MANIFEST).read_text(encoding="utf-8"))
                _state.verifier = Verifier.load(weights, manifest)
            except VerifierError as exc:
                _state.failed = exc
                raise
            except (OSError, ValueError, KeyError) as exc:
                _state.failed = VerifierError(f"the verifier's weights cannot be read: {exc}")
                raise _state.failed from None
        return _state.verifier
