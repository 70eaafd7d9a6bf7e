"""`hf-uq card DIR --results results.json [--route NAME]`: (re)generate a saved model's uncertainty card."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "card",
        help="Write a model's uncertainty card (README.md) from a results.json",
        description="Write DIR/README.md, the uncertainty model card of the route whose model is saved in DIR, "
        "from a benchmark or evaluate run's results.json, and copy the run's plots into DIR/plots/.",
    )
    parser.add_argument("model_dir", metavar="DIR", help="the saved model folder")
    parser.add_argument("--results", required=True, metavar="PATH", help="results.json (or the run folder holding it)")
    parser.add_argument("--route", metavar="NAME",
                        help="the route (default: the one whose saved model folder, in results.json, is DIR)")
    parser.add_argument("--model-id", metavar="REPO_ID", help="the Hub repository the card is for")
    parser.add_argument("--plots", metavar="DIR", help="folder of the report's *.png plots (default: the run's plots/)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.recommend import read_results
    from ..hub.cards import infer_route, write_model_card

    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    results_path = Path(args.results)
    if results_path.is_dir():
        results_path = results_path / "results.json"
    results = read_results(results_path)
    route = args.route
    if route is None:
        try:
            route = infer_route(results, model_dir, results_path.parent)
        except ValueError as error:
            raise CommandError(str(error)) from None
    plots = args.plots if args.plots is not None else results_path.parent / "plots"
    path = write_model_card(model_dir, results, route, plots_dir=plots, model_id=args.model_id)
    print(f"wrote {path} (route {route!r})")
    return 0
