"""Which embedding backend should be the default where the CPU has no native bf16? Speed and scores, side by side.

    GROUNDLENS_SHARED_DATA=../shared/data .venv/bin/python benchmarks/bench_backends.py [--steps 15] [--rounds 4]

1. Speed, in one run, one thread each, rotating round by round: raw encode of realistic steps (the
   question, ~160-word context and ~55-word answer of benchmarks/rag_graph.py, unique texts) by
   sentence-transformers (one text per forward pass: the yardstick), ``packed-torch`` (fp32),
   ``packed-bf16`` (only on a CPU with native bf16), ``onnx-fp32``, ``onnx-int8`` and torch's own
   dynamic int8 quantisation of the same model (``torch.ao.quantization.quantize_dynamic`` on its
   linear layers: a candidate measured here, not a backend). Steps/s and the ratio to
   sentence-transformers; on a shared machine the ratios are the figures to read.
2. Scores, each backend against ``packed-torch`` on the dev sets in ``$GROUNDLENS_SHARED_DATA``
   (halueval_qa.csv, faithbench_dev.csv with the fixed question "Summarize the source text.",
   claims_dev.csv, claims_v2_dev.csv), every default signal on: max |SGI difference|, rows whose band
   changes, and the AUROC of SGI and of the score (label 1 = grounded) with the difference. The bar
   for a default: no band change on any set.

Prints the CPU features torch sees (``torch.backends.cpu.get_cpu_capability()``, native bf16).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halueval_split import SHARED  # noqa: E402
from rag_graph import make_texts  # noqa: E402

from groundlens_core.embedding import get_embedder  # noqa: E402
from groundlens_core.embedding.onnx_backend import onnx_available  # noqa: E402
from groundlens_core.embedding.packed import bf16_supported  # noqa: E402
from groundlens_core.embedding.resolve import resolve_model_path  # noqa: E402
from groundlens_core.quality.metrics import auroc  # noqa: E402
from groundlens_core.scoring import evaluate_batch  # noqa: E402

SETS = ("halueval_qa.csv", "faithbench_dev.csv", "claims_dev.csv", "claims_v2_dev.csv")
FAITH_QUESTION = "Summarize the source text."


class TorchDynamicInt8:
    """sentence-transformers' model with ``torch.ao.quantization.quantize_dynamic`` on its linear
    layers (qint8 weights), one text per forward pass."""

    backend = "torch dynamic int8"

    def __init__(self) -> None:
        import warnings

        import torch
        from sentence_transformers import SentenceTransformer

        path, _ = resolve_model_path()
        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated in torch 2.x
            self.model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.model.encode([t], convert_to_numpy=True, show_progress_bar=False)[0] for t in texts])


def speed(steps: int, rounds: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    embs: dict[str, Any] = {"sentence-transformers": get_embedder(backend="sentence-transformers").inner}
    embs["packed-torch"] = get_embedder(backend="packed-torch").inner
    if bf16_supported():
        embs["packed-bf16"] = get_embedder(backend="packed-bf16").inner
    if onnx_available():
        embs["onnx-fp32"] = get_embedder(backend="onnx-fp32").inner
        embs["onnx-int8"] = get_embedder(backend="onnx-int8").inner
    try:
        embs["torch dynamic int8"] = TorchDynamicInt8()
    except Exception as exc:  # noqa: BLE001 - a torch without it: say so and go on
        print(f"torch dynamic int8 unavailable: {exc}")
    names = list(embs)
    texts = make_texts(1 + rounds * steps * len(names) + 50, seed=21)
    for e in embs.values():
        e.encode(list(texts[0]))
    rates: dict[str, list[float]] = {k: [] for k in names}
    at = 1
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            chunk = texts[at : at + steps]
            at += steps
            t0 = time.perf_counter()
            for step in chunk:
                embs[name].encode(list(step))
            rates[name].append(len(chunk) / (time.perf_counter() - t0))
    ref_texts = [t for step in texts[at : at + 50] for t in step]
    ref = embs["packed-torch"].encode(ref_texts).astype(np.float64)
    base = statistics.median(rates["sentence-transformers"])
    print(f"\nraw encode of realistic steps, one thread each, {rounds} rounds of {steps} steps, rotating:")
    for name, rs in rates.items():
        cos = (ref * embs[name].encode(ref_texts).astype(np.float64)).sum(1)
        print(f"  {name:22s} {statistics.median(rs):6.1f} steps/s  {statistics.median(rs) / base:5.2f}x sentence-transformers"
              f"  (min cosine to packed-torch {cos.min():.6f}; rounds {', '.join(f'{x:.1f}' for x in rs)})")
    return embs


def read(name: str) -> list[dict[str, str]]:
    with open(SHARED / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def quality(backends: list[str], sets: tuple[str, ...] = SETS) -> None:
    ref = get_embedder(backend="packed-torch")
    print("\nscores against packed-torch (fp32), every default signal; AUROC: label 1 = grounded scores higher")
    print(f"  {'data':18s} {'backend':13s} {'rows':>5s} {'max|dSGI|':>10s} {'bands changed':>13s} "
          f"{'AUROC SGI':>17s} {'AUROC score':>17s}")
    for name in sets:
        if not (SHARED / name).is_file():
            print(f"  {name}: not found under {SHARED}, skipped")
            continue
        rows = read(name)
        items = [{"question": r["question"] or FAITH_QUESTION, "response": r["response"], "context": r["context"]} for r in rows]
        y = np.array([int(r["label"]) for r in rows])
        base = evaluate_batch(items, embedder=ref)
        a_sgi = np.array([b.value for b in base])
        a_rank = np.array([b.score for b in base])
        for backend in backends:
            res = evaluate_batch(items, embedder=get_embedder(backend=backend))
            sgi = np.array([r.value for r in res])
            rank = np.array([r.score for r in res])
            changed = sum(r.triage != b.triage for r, b in zip(res, base))
            print(f"  {name:18s} {backend:13s} {len(rows):5d} {np.abs(sgi - a_sgi).max():10.6f} {changed:13d} "
                  f"{auroc(a_sgi, y):.4f} {auroc(sgi, y) - auroc(a_sgi, y):+.4f} "
                  f"{auroc(a_rank, y):.4f} {auroc(rank, y) - auroc(a_rank, y):+.4f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15, help="steps per speed round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--no-speed", action="store_true", help="the scores only")
    parser.add_argument("--sets", default=",".join(SETS), help="dev sets to score (comma separated)")
    parser.add_argument("--backends", default="", help="backends to compare with packed-torch (comma separated; default: all here)")
    args = parser.parse_args(argv)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, native bf16 {bf16_supported()}, "
          f"ONNX Runtime {'installed' if onnx_available() else 'missing'}")
    if not args.no_speed:
        speed(args.steps, args.rounds)
    backends = [b for b in ("onnx-fp32", "onnx-int8") if onnx_available()]
    backends += ["packed-bf16"] if bf16_supported() else []
    backends += ["sentence-transformers"]
    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    quality(backends, tuple(x.strip() for x in args.sets.split(",") if x.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
