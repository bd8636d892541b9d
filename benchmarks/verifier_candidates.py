"""The candidates for deciding the band, each validated leaving one whole file out.

For every file written by others in ``$GROUNDLENS_SHARED_DATA/train`` (and the dev sets, which no
candidate is fitted on), the AUROC with a 95 % bootstrap interval of:

- ``rules``: the score the hand-written rules give (the verifier switched off), and its components
  SGI (rows with a question), support and fewer failed findings;
- ``signals (logistic)``: a logistic regression over the rules' signals (normalised SGI, support,
  failed findings by kind, a question present), fitted on the four other files;
- ``verifier``: the trained cross-encoder's out-of-fold logit (from the training run's ``folds.json``:
  ``make train-verifier`` writes it);
- ``verifier + signals``: a logistic regression over both, fitted on the four other files;
- ``sentences (logistic)``: candidate (c) sentence by sentence: a logistic regression over each
  response sentence's signals (``verifier_features.py``: support, similarity, word-piece alignment,
  failed findings by kind, supported findings, SGI), fitted on the weakest sentence of each response
  (the response's probability is its weakest sentence's), on the four other files, then ``+ generated``
  with the generated pairs of those four files besides;
- ``trees + generated``: gradient-boosted trees over the sentences' signals (min, max, mean), fitted
  on the same (printed when scikit-learn is installed);
- and the baselines: word overlap with the context, shorter response.

Usage: ``python benchmarks/verifier_candidates.py [--work build/verifier] [--out candidates.json]``.
Scoring the pool with the rules takes a few minutes on 2 cores, and the sentence signals of every
row (generated pairs included) about 15 minutes; both are cached in the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

os.environ["GROUNDLENS_VERIFIER"] = "off"

from groundlens_core.quality.benchmark import auroc_ci
from groundlens_core.quality.metrics import length_baseline, overlap_baseline
from groundlens_core.scoring import evaluate_batch
from groundlens_core.verifier import pool
from groundlens_core.verifier.train import SEED, StoredStates, held_out_rows, load_examples, weakest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verifier_features import alignment, content_mask, sentence_features  # noqa: E402

KINDS = ("value", "name", "polarity", "condition", "claim")


def _kind(k: str) -> str:
    return k if k in KINDS else ("name" if k == "name" else "value")


def features(res) -> list[float]:
    ev = getattr(res, "evidence", None)
    failed = ev.failed_facts() if ev is not None else []
    by = {k: 0 for k in KINDS}
    for f in failed:
        by[_kind(f.kind)] += 1
    return [
        res.normalized if res.method == "sgi" else 0.0,
        1.0 if res.method == "sgi" else 0.0,
        ev.support if ev is not None else 0.0,
        *[min(3, v) for v in by.values()],
        res.score,
    ]


def logistic_fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> np.ndarray:
    x = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        g = x.T @ (p - y) + l2 * np.r_[w[:-1], 0]
        h = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.diag(np.r_[np.ones(len(w) - 1), 0])
        w -= np.linalg.solve(h + 1e-9 * np.eye(len(w)), g)
    return w


def logistic_apply(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.hstack([x, np.ones((len(x), 1))]) @ w


def sentence_signals(work: Path, examples: dict) -> dict[str, list]:
    """Every row's ``(sentence signals, rules' score)`` (None for a row that could not be scored),
    cached in ``sentfeats.pkl``; word-piece states from the training run's ``states.pkl`` when there
    is one, else computed."""
    from groundlens_core.embedding.resolve import resolve_model_path
    from groundlens_core.verifier.states import ModelStates

    path = work / "sentfeats.pkl"
    out: dict[str, list] = pickle.loads(path.read_bytes()) if path.is_file() else {}
    todo = [n for n in examples if n not in out]
    if not todo:
        return out
    states = work / "states.pkl"
    store = StoredStates(ModelStates(), pickle.loads(states.read_bytes()) if states.is_file() else {})
    mask = content_mask(str(resolve_model_path(None)[0]))
    for name in todo:
        rows, feats = examples[name], []
        for i in range(0, len(rows), 400):
            chunk = rows[i : i + 400]
            res = evaluate_batch(
                [{"question": e.question or None, "response": e.response, "context": e.context} for e in chunk],
                errors="record",
            )
            for e, r in zip(chunk, res):
                ev = getattr(r, "evidence", None)
                if r.method == "error" or ev is None:
                    feats.append(None)
                    continue
                al = alignment(store, mask, e.response, [e.context], [(x.start, x.end) for x in ev.sentences])
                sgi = r.normalized if r.method == "sgi" else None
                feats.append((sentence_features(ev, al, sgi), r.score))
        out[name] = feats
        path.write_bytes(pickle.dumps(out))
        print(f"sentence signals of {name}", file=sys.stderr, flush=True)
    return out


def weakest_fit(groups: list[tuple[list, float]], l2: float = 1.0, rounds: int = 6):
    """A logistic regression over sentence signals whose response score is its weakest sentence's:
    fitted first on each response's mean signals, then again on its weakest sentence under the last
    fit. ``groups``: (rows of ``(signals, label)``, weight), each group weighing its weight in all."""
    allx = np.vstack([x for g, _ in groups for x, _ in g])
    mu, sd = allx.mean(0), allx.std(0) + 1e-9
    w = np.zeros(allx.shape[1] + 1)
    for r in range(rounds):
        xs, ys, ws = [], [], []
        for g, weight in groups:
            for x, y in g:
                z = (x - mu) / sd
                xs.append(z[int(np.argmin(z @ w[:-1]))] if r else z.mean(0))
                ys.append(y)
                ws.append(weight / len(g))
        x1 = np.hstack([np.array(xs), np.ones((len(xs), 1))])
        y1, w1 = np.array(ys, dtype=float), np.array(ws) * len(ws) / sum(ws)
        for _ in range(30):
            p = 1 / (1 + np.exp(-x1 @ w))
            grad = x1.T @ (w1 * (p - y1)) + l2 * np.r_[w[:-1], 0]
            hess = (x1 * (w1 * p * (1 - p))[:, None]).T @ x1 + l2 * np.diag(np.r_[np.ones(len(w) - 1), 0])
            w = w - np.linalg.solve(hess + 1e-9 * np.eye(len(w)), grad)
    return w, mu, sd


def _picked(rows: list, name: str) -> list[int]:
    import random

    from groundlens_core.verifier.train import HELD_OUT_ROWS

    if name not in pool.TRAIN_FILES or len(rows) <= HELD_OUT_ROWS:
        return list(range(len(rows)))
    return sorted(random.Random(SEED).sample(range(len(rows)), HELD_OUT_ROWS))


def weakest_apply(model, feats: list) -> list[float]:
    w, mu, sd = model
    return [float((((f[0] - mu) / sd) @ w[:-1]).min() + w[-1]) if f is not None and len(f[0]) else 0.0 for f in feats]


def _summary(f) -> np.ndarray:
    x = f[0]
    return np.r_[x.min(0), x.max(0), x.mean(0), len(x)]


def trees_fit(groups: list[tuple[list, float]]):
    from sklearn.ensemble import HistGradientBoostingClassifier

    xs = np.vstack([_summary(f) for g, _ in groups for f, _ in g])
    ys = np.concatenate([[y for _, y in g] for g, _ in groups])
    ws = np.concatenate([np.full(len(g), weight / len(g)) for g, weight in groups])
    model = HistGradientBoostingClassifier(
        max_iter=150, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=40, l2_regularization=1.0, random_state=0
    )
    return model.fit(xs, ys, sample_weight=ws * len(ws) / ws.sum())


def trees_apply(model, feats: list) -> list[float]:
    return [float(model.predict_proba(_summary(f)[None])[0, 1]) if f is not None and len(f[0]) else 0.0 for f in feats]


def _labelled(feats: list, rows: list) -> list:
    return [(f, e.label) for f, e in zip(feats, rows) if f is not None and len(f[0])]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="build/verifier")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(args.work)
    full = load_examples()
    sent = sentence_signals(work, full)
    # the rows each file is scored on (its seeded sample when larger than a fold scores)
    picked = {n: _picked(full[n], n) for n in full}
    examples = full
    # a file left out is scored on the rows its fold scored (a seeded sample of the largest)
    examples = {n: (held_out_rows(examples, n) if n in pool.TRAIN_FILES else rows) for n, rows in examples.items()}
    cache = work / "rule_signals.pkl"
    sig: dict[str, np.ndarray] = pickle.loads(cache.read_bytes()) if cache.is_file() else {}
    names = [n for n in pool.TRAIN_FILES + pool.DEV_FILES + pool.VALIDATION_ONLY if n in examples]
    for n in names:
        if n in sig:
            continue
        rows = examples[n]
        res = evaluate_batch(
            [{"question": e.question or None, "response": e.response, "context": e.context} for e in rows],
            errors="record",
        )
        sig[n] = np.array([features(r) if r.method != "error" else [0.0] * (4 + len(KINDS)) for r in res], dtype=float)
        cache.write_bytes(pickle.dumps(sig))
        print(f"scored {n} with the rules", file=sys.stderr, flush=True)
    folds = json.loads((work / "folds.json").read_text()) if (work / "folds.json").is_file() else {}
    table: dict[str, dict] = {}
    for n in names:
        rows = examples[n]
        y = np.array([e.label for e in rows])
        fit_files = [f for f in pool.TRAIN_FILES if f != n]
        entry: dict[str, dict] = {}
        entry["rules"] = auroc_ci(sig[n][:, -1].tolist(), y.tolist())
        # the rules' components: SGI (rows with a question), support, fewer failed findings
        has_sgi = sig[n][:, 1] > 0
        if has_sgi.any():
            entry["SGI"] = auroc_ci(sig[n][has_sgi, 0].tolist(), y[has_sgi].tolist())
        entry["support"] = auroc_ci(sig[n][:, 2].tolist(), y.tolist())
        entry["facts"] = auroc_ci((-sig[n][:, 3:-1].sum(axis=1)).tolist(), y.tolist())
        xs = np.vstack([sig[f][:, :-1] for f in fit_files])
        ys = np.concatenate([[e.label for e in examples[f]] for f in fit_files])
        w = logistic_fit(xs, ys)
        entry["signals (logistic)"] = auroc_ci(logistic_apply(w, sig[n][:, :-1]).tolist(), y.tolist())
        if folds:
            if n in pool.TRAIN_FILES and n in folds:
                v = np.array([weakest(x) for x in folds[n][n]])
            elif n not in pool.TRAIN_FILES:
                v = np.mean([[weakest(x) for x in folds[h][n]] for h in folds if n in folds[h]], axis=0)
            else:
                v = None
            if v is not None:
                entry["verifier"] = auroc_ci(v.tolist(), y.tolist())
                # the combination: fitted on the four other files' out-of-fold logits
                fit_v = [f for f in fit_files if f in folds]
                if fit_v:
                    xs2 = np.vstack(
                        [np.hstack([sig[f][:, :-1], np.array([[weakest(x)] for x in folds[f][f]])]) for f in fit_v]
                    )
                    ys2 = np.concatenate([[e.label for e in examples[f]] for f in fit_v])
                    w2 = logistic_fit(xs2, ys2)
                    entry["verifier + signals"] = auroc_ci(
                        logistic_apply(w2, np.hstack([sig[n][:, :-1], v[:, None]])).tolist(), y.tolist()
                    )
        own = [sent[n][i] for i in picked[n]]
        generated = [(_labelled(sent[f"generated:{f}"], full[f"generated:{f}"]), 1.0) for f in fit_files]
        natural_full = [(_labelled(sent[f], full[f]), 1.0) for f in fit_files]
        fitted = weakest_fit([([(f[0], y) for f, y in g], w_) for g, w_ in natural_full])
        entry["sentences (logistic)"] = auroc_ci(weakest_apply(fitted, own), y.tolist())
        both = natural_full + generated
        fitted = weakest_fit([([(f[0], y) for f, y in g], w_) for g, w_ in both])
        entry["sentences + generated"] = auroc_ci(weakest_apply(fitted, own), y.tolist())
        try:
            entry["trees + generated"] = auroc_ci(trees_apply(trees_fit(both), own), y.tolist())
        except ImportError:
            pass
        entry["baseline: word overlap"] = auroc_ci([overlap_baseline(e.response, e.context) for e in rows], y.tolist())
        entry["baseline: shorter response"] = auroc_ci([length_baseline(e.response) for e in rows], y.tolist())
        table[n] = entry
    cols = [
        "rules",
        "SGI",
        "support",
        "facts",
        "signals (logistic)",
        "verifier",
        "verifier + signals",
        "sentences (logistic)",
        "sentences + generated",
        "trees + generated",
        "baseline: word overlap",
        "baseline: shorter response",
    ]
    print(f"{'file':<18} " + " ".join(f"{c[:20]:>20}" for c in cols))
    for n, e in table.items():
        cells = [f"{e[c]['auroc']:.3f} [{e[c]['low']:.2f},{e[c]['high']:.2f}]" if c in e else "-" for c in cols]
        print(f"{n:<18} " + " ".join(f"{c:>20}" for c in cells))
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
