"""What the benchmarks that drive a scripted model share: their options and the percentile they report."""

from __future__ import annotations

import argparse


def scripted_model_options(description: str, runs: int) -> argparse.ArgumentParser:
    """``--runs`` and ``--delay``: how often each case runs, and how long the scripted model sleeps
    per call, standing in for an LLM's latency so the figures weigh the tracing against it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the scripted model sleeps per call")
    return parser


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by the nearest rank (no interpolation: a value that was measured)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
