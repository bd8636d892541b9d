"""groundlens: grounding triage for LLM agents.

Scores every LLM output deterministically with sentence embeddings (no second LLM) so that humans
review the riskiest outputs first. SGI (with sentence evidence and support) is used when the
response has a question and a context, support alone when it has a context and no question, DGI
when it has no context. The scores are triage signals for ranking, never verdicts of truth.

Importing this package is cheap: torch and the model load on the first score.
"""

from groundlens_core._version import __version__
from groundlens_core.embedding import get_embedder
from groundlens_core.errors import (
    CalibrationMismatchError,
    EmbeddingError,
    GroundlensError,
    GroundlensInputError,
    ModelNotFoundError,
)
from groundlens_core.ledger import Ledger, LedgerVerdict, verify_ledger
from groundlens_core.scoring import compute_dgi, compute_sgi, evaluate, evaluate_batch
from groundlens_core.scoring.bands import BANDS, TRIAGE_NOTE, normalize, triage
from groundlens_core.scoring.calibration import CalibrationResult, bundled_direction, calibrate
from groundlens_core.scoring.decision import Decision
from groundlens_core.scoring.results import (
    DGIResult,
    Evidence,
    FactFinding,
    GroundlensResult,
    GroundlensScore,
    ScoreError,
    SentenceEvidence,
    SGIResult,
    SupportResult,
    UnsupportedToken,
)
from groundlens_core.stream import evaluate_stream

__all__ = [
    "__version__",
    "BANDS",
    "TRIAGE_NOTE",
    "CalibrationMismatchError",
    "CalibrationResult",
    "DGIResult",
    "Decision",
    "Evidence",
    "FactFinding",
    "SentenceEvidence",
    "SupportResult",
    "UnsupportedToken",
    "EmbeddingError",
    "GroundlensError",
    "GroundlensInputError",
    "GroundlensResult",
    "GroundlensScore",
    "Ledger",
    "LedgerVerdict",
    "ModelNotFoundError",
    "SGIResult",
    "ScoreError",
    "bundled_direction",
    "calibrate",
    "compute_dgi",
    "compute_sgi",
    "evaluate",
    "evaluate_batch",
    "evaluate_stream",
    "get_embedder",
    "normalize",
    "triage",
    "verify_ledger",
]
