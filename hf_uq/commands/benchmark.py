"""`hf-uq benchmark`: the UQ-fidelity protocol end to end on the embedded digits benchmark (no network).

```bash
hf-uq benchmark                                   # 3 seeds, every route and sweep, ~6 min on 2 cores
hf-uq benchmark --quick                           # 1 seed, smaller sweeps, about a minute
hf-uq benchmark --budget memory=1.2,latency=1.5   # mark the routes within 1.2x memory and 1.5x P99 latency
```

Writes `results.json`, the predictions, `report.md` / `report.html` with plots, and every model (with its
uncertainty card) under `--output`; trained models are cached there, so a re-run only re-evaluates.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

HELP = ("Train and compare every route (deep ensemble, duo, BatchEnsembleViT, Dirichlet student, int8, ...) on "
        "the embedded digits benchmark and write a report.")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `benchmark` subcommand to `subparsers`."""
    from ..evaluation.benchmark import DEFAULT_BOOTSTRAP, DEFAULT_OUTPUT, QUICK_BOOTSTRAP

    parser = subparsers.add_parser(
        "benchmark", help=HELP, description=HELP + " Trained models are cached in the output folder.",
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT, metavar="DIR", help=f"folder to write (and cache models in); default {DEFAULT_OUTPUT}")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                        help="training seeds (default 0 1 2; 0 with --quick); the budget is measured on the first "
                             "seed's models")
    parser.add_argument("--quick", action="store_true",
                        help="a run under 2 minutes: one seed (unless --seeds), fewer epochs, smaller sweeps, "
                             f"{QUICK_BOOTSTRAP} bootstrap resamples")
    parser.add_argument("--budget", metavar="memory=X,latency=Y",
                        help="bounds on peak memory and P99 latency relative to the single model; marks the routes "
                             "that fit")
    parser.add_argument("--bootstrap", type=int, default=None, metavar="N",
                        help=f"bootstrap resamples per 95%% interval (default {DEFAULT_BOOTSTRAP}, "
                             f"{QUICK_BOOTSTRAP} with --quick; 0: estimates only)")
    parser.add_argument("--workers", type=int, default=2, metavar="N",
                        help="processes training models, predicting seeds and scoring (one torch thread each); default 2")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Runs `hf-uq benchmark`; bad input raises (the CLI prints it on one line and exits with status 2)."""
    from ..evaluation.benchmark import run_benchmark

    argv = getattr(args, "argv", None)
    seeds = args.seeds if args.seeds is not None else [0] if args.quick else [0, 1, 2]
    results = run_benchmark(
        args.output, seeds=seeds, quick=args.quick, budget=args.budget, bootstrap=args.bootstrap,
        workers=args.workers, progress=not args.quiet,
        command=None if argv is None else "hf-uq " + shlex.join(argv),
    )
    timings = results["timings"]
    print(f"hf-uq benchmark: wrote {args.output}/results.json and report.html ({len(results['routes'])} routes, "
          f"{len(results['seeds'])} seed(s), {timings['models_trained']} models trained, "
          f"{timings['models_cached']} reused, {timings['total_s']:.0f} s)")
    return 0
