"""`hf-uq recommend --results results.json --priority ood|calibration|selective [--memory X] [--latency Y]`."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..evaluation.recommend import Priority

    parser = subparsers.add_parser(
        "recommend",
        help="Choose a route: drop those over budget, rank the rest by an uncertainty priority",
        description="Drop the routes of a run whose peak memory or latency (relative to the reference route) "
        "exceed the budget, rank the rest by the chosen uncertainty priority using the measured intervals "
        "(overlapping intervals are a tie), and explain the choice. Exit status 1 when no route fits.",
    )
    parser.add_argument("--results", required=True, metavar="PATH", help="results.json (or the run folder holding it)")
    parser.add_argument("--priority", required=True, choices=[p.value for p in Priority],
                        help="ood: mean OOD AUROC; calibration: ECE, then NLL; selective: AURC")
    parser.add_argument("--memory", type=float, metavar="X",
                        help="largest peak memory relative to the reference route (default: the run's --budget, "
                        "else unbounded)")
    parser.add_argument("--latency", type=float, metavar="Y",
                        help="largest p99 latency relative to the reference route (default: the run's --budget, "
                        "else unbounded)")
    parser.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.recommend import read_results, recommend

    results = read_results(args.results)
    budget = (results.get("settings") or {}).get("budget") or {}
    memory = args.memory if args.memory is not None else budget.get("memory")
    latency = args.latency if args.latency is not None else budget.get("latency")
    recommendation = recommend(results, args.priority, memory=memory, latency=latency)
    if args.json:
        print(json.dumps(recommendation.to_dict(), indent=2))
    else:
        print(recommendation.format())
    return 0 if recommendation.ranking else 1
