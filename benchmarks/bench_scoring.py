"""Time `score_pooled` / `score_difference` against the per-resample loop they replaced, in one run.

    python benchmarks/bench_scoring.py                # 3 seeds x 434 rows + 2 OOD sets (354, 434), 1000 resamples
    python benchmarks/bench_scoring.py --bootstrap 200 --repeat 1

The old implementation recomputed every metric on each resample with the unweighted `hf_uq.functional` calls;
the new one evaluates the weighted metrics (`hf_uq.functional.weighted`) on a batch of resamples at once. Both
draw the same resamples; the last column is the largest absolute difference between their results.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from hf_uq.evaluation import Predictions, score_difference, score_pooled
from hf_uq.evaluation.scoring_reference import per_resample_score


def fake(n, seed, labelled=True, sharp=4.0, labels=None):
    """Digits-like predictions: float32 logits, msp uncertainty in float32 (ties where p saturates)."""
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(n, 8)) * sharp).astype(np.float32)
    probs = torch.from_numpy(logits).double().softmax(-1).numpy()
    if labels is None:
        labels = np.where(rng.random(n) < 0.96, probs.argmax(1), rng.integers(0, 8, n)) if labelled else np.full(n, -1)
    u = (1.0 - probs.max(1)).astype(np.float32)
    return Predictions(logits, probs, labels.astype(np.int64), u)


def interleaved(repeat, old, new, new_per_old=5):
    """Best wall time of each, the runs interleaved so that both see the same load on a shared machine."""
    t_old, t_new, r_old, r_new = float("inf"), float("inf"), None, None
    for _ in range(repeat):
        start = time.perf_counter()
        r_old = old()
        t_old = min(t_old, time.perf_counter() - start)
        for _ in range(new_per_old):
            start = time.perf_counter()
            r_new = new()
            t_new = min(t_new, time.perf_counter() - start)
    return t_old, t_new, r_old, r_new


def max_difference(a, b):
    return max(float(np.nanmax(np.abs(np.subtract(a[k], b[k])))) if not np.isnan(a[k]).all() else 0.0 for k in a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=434)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    seeds = [fake(args.rows, s) for s in range(args.seeds)]
    others = [fake(args.rows, 100 + s, labels=p.labels) for s, p in enumerate(seeds)]
    ood = {"ood_near": [fake(354, 10 + s, False, 1.5) for s in range(args.seeds)],
           "ood_far": [fake(434, 20 + s, False, 0.8) for s in range(args.seeds)]}
    ood_b = {name: [fake(len(p), 200 + s, False, 1.2) for s, p in enumerate(parts)] for name, parts in ood.items()}
    print(f"{args.seeds} seeds x {args.rows} rows + OOD {[len(p[0]) for p in ood.values()]}, "
          f"{args.bootstrap} resamples, best of {args.repeat} (old) and {5 * args.repeat} (new) interleaved runs; "
          f"load average {os.getloadavg()[0]:.2f}")

    rows = [
        ("score_pooled", lambda: per_resample_score(score_pooled, seeds, ood=ood, bootstrap=args.bootstrap),
         lambda: {k: tuple(v) for k, v in score_pooled(seeds, ood=ood, bootstrap=args.bootstrap).items()}),
        ("score_difference", lambda: per_resample_score(score_difference, seeds, others, ood=(ood, ood_b),
                                                        bootstrap=args.bootstrap),
         lambda: {k: tuple(v) for k, v in score_difference(seeds, others, ood=(ood, ood_b),
                                                           bootstrap=args.bootstrap).items()}),
    ]
    print(f"{'call':18s} {'old (s)':>9s} {'new (s)':>9s} {'speed-up':>9s} {'max |diff|':>11s}")
    for name, old, new in rows:
        t_old, t_new, r_old, r_new = interleaved(args.repeat, old, new)
        print(f"{name:18s} {t_old:9.3f} {t_new:9.4f} {t_old / t_new:8.1f}x {max_difference(r_old, r_new):11.1e}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
