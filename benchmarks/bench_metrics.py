"""Time hf_uq's metrics side by side with torchmetrics and scikit-learn in one run.

    python benchmarks/bench_metrics.py                 # N = 1e6 and 1e7, C = 10, best of 5, peers interleaved
    python benchmarks/bench_metrics.py --sizes 100000  # a quick run

Every peer gets the same float32 inputs (realistic: ~85% accuracy, ties from float32
confidences); the ratio column is peer time / hf_uq time (> 1 means hf_uq is faster).
Peer results are checked against hf_uq's so a fast wrong answer cannot pass unnoticed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torchmetrics.functional.classification import (
    binary_auroc,
    multiclass_calibration_error,
)

from hf_uq import functional as F


def best_of(repeat, fn, *args, **kwargs):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times), result


def race(repeat, *calls):
    """Best time and result of each `(fn, args, kwargs)`, the calls interleaved round by round so that load
    changes on a shared machine hit every contender alike."""
    times = [[] for _ in calls]
    results = [None] * len(calls)
    for _ in range(repeat):
        for k, (fn, args, kwargs) in enumerate(calls):
            start = time.perf_counter()
            results[k] = fn(*args, **kwargs)
            times[k].append(time.perf_counter() - start)
    return [(min(t), r) for t, r in zip(times, results, strict=True)]


def make_data(n: int, c: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    logits = rng.normal(size=(n, c)).astype(np.float32) * 1.5
    logits[np.arange(n), labels] += 3.0
    logits -= logits.max(1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(1, keepdims=True)
    return probs, labels


def naive_aurc(uncertainty, correct):
    """The textbook argsort implementation (not tie-exact), for scale."""
    order = np.argsort(uncertainty, kind="stable")
    errors = np.cumsum(~correct[order])
    return float(np.mean(errors / np.arange(1, len(order) + 1)))


def run(n: int, c: int, repeat: int) -> list[tuple[str, float, str, float]]:
    probs, labels = make_data(n, c)
    probs_t, labels_t = torch.from_numpy(probs), torch.from_numpy(labels)
    conf, pred = F.top_label(probs)
    correct = pred == labels
    u = 1.0 - conf
    half = n // 2
    id_s, ood_s = u[:half], u[half:] + np.float32(0.05) * (u[half:] > 0.1)
    ood_y = np.r_[np.zeros(half), np.ones(n - half)]
    ood_all = np.r_[id_s, ood_s]
    rows = []

    (t_ours, ece), (t_tm, tm) = race(
        repeat, (F.ece, (probs, labels), {}),
        (multiclass_calibration_error, (probs_t, labels_t), {"num_classes": c, "n_bins": 15}))
    assert abs(ece - float(tm)) < 1e-4, (ece, float(tm))
    rows.append(("ece", t_ours, "torchmetrics calibration_error", t_tm))

    (t_ours, area), (t_naive, naive) = race(repeat, (F.aurc, (u, correct), {}), (naive_aurc, (u, correct), {}))
    assert abs(area - naive) < 1e-3
    rows.append(("aurc", t_ours, "argsort reference (not tie-exact)", t_naive))

    t_ours, _ = best_of(repeat, F.sac, u, correct)
    rows.append(("sac@98", t_ours, "argsort reference (not tie-exact)", t_naive))

    (t_ours, cp), (t_tm, tm), (t_sk, sk) = race(
        repeat, (F.cp_auroc, (conf, correct), {}),
        (binary_auroc, (torch.from_numpy(conf), torch.from_numpy(correct.astype(np.int64))), {}),
        (roc_auc_score, (correct, conf), {}))
    assert abs(cp - sk) < 1e-9 and abs(cp - float(tm)) < 1e-4
    rows.append(("cp_auroc", t_ours, "torchmetrics binary_auroc", t_tm))
    rows.append(("cp_auroc", t_ours, "sklearn roc_auc_score", t_sk))

    (t_ours, auc), (t_tm, tm), (t_sk, sk) = race(
        repeat, (F.ood_auroc, (id_s, ood_s), {}),
        (binary_auroc, (torch.from_numpy(ood_all), torch.from_numpy(ood_y.astype(np.int64))), {}),
        (roc_auc_score, (ood_y, ood_all), {}))
    assert abs(auc - sk) < 1e-9 and abs(auc - float(tm)) < 1e-4
    rows.append(("ood_auroc", t_ours, "torchmetrics binary_auroc", t_tm))
    rows.append(("ood_auroc", t_ours, "sklearn roc_auc_score", t_sk))

    def all_five():
        F.ece(probs, labels)
        F.selective_metrics(u, correct)  # aurc, e-aurc and sac from one ordering
        F.cp_auroc(conf, correct)
        F.ood_auroc(id_s, ood_s)

    t_all, _ = best_of(repeat, all_five)
    rows.append(("all five together", t_all, "", float("nan")))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"torch threads: {torch.get_num_threads()}, best of {args.repeat}, C = {args.classes}")
    for n in args.sizes:
        print(f"\nN = {n:,}")
        print("| metric | hf_uq (s) | peer | peer (s) | peer / hf_uq |\n|---|---|---|---|---|")
        for name, ours, peer, theirs in run(n, args.classes, args.repeat):
            ratio = f"{theirs / ours:.2f}x" if peer else ""
            peer_t = f"{theirs:.3f}" if peer else ""
            print(f"| {name} | {ours:.3f} | {peer} | {peer_t} | {ratio} |")


if __name__ == "__main__":
    main()
