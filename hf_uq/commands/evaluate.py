"""`hf-uq evaluate`: run the evaluation protocol on your own checkpoints and datasets.

```bash
hf-uq evaluate --model ./my-vit --model ./my-duo --teacher ./my-ensemble \
    --dataset uoft-cs/cifar10 --image-column img --ood ufldl-stanford/svhn:test --budget memory=1.2,latency=1.5
accelerate launch --multi_gpu --num_processes 2 -m hf_uq.cli evaluate ...   # shards every split
```
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..evaluation.user_eval import DEFAULT_OUTPUT

HELP = "Evaluate your own checkpoints: calibration, selective prediction, OOD detection, fidelity and budget."


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `evaluate` subcommand to `subparsers`."""
    parser = subparsers.add_parser(
        "evaluate", help=HELP, description=HELP + " Writes results.json, the predictions and a report. Under "
        "`accelerate launch` every split is sharded across the processes.",
    )
    parser.add_argument("--model", action="append", required=True, metavar="ID_OR_DIR",
                        help="an image classifier (folder written by save_pretrained, with its image processor, or "
                             "Hub id); repeat for several; the first is the reference of every cost ratio")
    parser.add_argument("--teacher", metavar="ID_OR_DIR",
                        help="a model (e.g. a deep ensemble) whose uncertainty the others' fidelity is measured against")
    parser.add_argument("--dataset", required=True, metavar="ID_OR_DIR",
                        help="Hub dataset id, save_to_disk folder or image folder (one subfolder per class)")
    parser.add_argument("--split", default="test", help="the labelled in-distribution split to score (default: test)")
    parser.add_argument("--calibration-split", metavar="SPLIT",
                        help="a labelled split of --dataset to predict and save as well (not scored)")
    parser.add_argument("--ood", action="append", required=True, metavar="ID_OR_DIR[:SPLIT]",
                        help="an out-of-distribution set (repeat for several); its labels are ignored")
    parser.add_argument("--image-column", default="image", help="image column of --dataset (default: image)")
    parser.add_argument("--label-column", default="label", help="label column of --dataset (default: label)")
    parser.add_argument("--ood-image-column", metavar="COLUMN", help="image column of the OOD sets "
                        "(default: --image-column)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, metavar="DIR", help=f"folder to write (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="bootstrap resamples per 95%% interval; 0: estimates only (default: 1000)")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N", help="images per forward pass (default: 64)")
    parser.add_argument("--budget", metavar="memory=X,latency=Y",
                        help="bounds on peak memory and P99 latency relative to the first --model")
    parser.add_argument("--num-threads", type=int, metavar="N", help="torch threads while predicting (default: unchanged)")
    parser.add_argument("--cpu", action="store_true", help="predict on the CPU even when a GPU is visible")
    parser.add_argument("--no-budget", dest="measure_budget", action="store_false",
                        help="skip measuring parameters, FLOPs, memory and latency")
    parser.add_argument("--no-report", dest="report", action="store_false", help="write no report")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Runs `hf-uq evaluate`; bad input raises (the CLI prints it on one line and exits with status 2)."""
    from ..evaluation.user_eval import evaluate_checkpoints

    argv = getattr(args, "argv", None)
    results = evaluate_checkpoints(
        args.model, args.dataset, ood=args.ood, teacher=args.teacher, split=args.split,
        calibration_split=args.calibration_split, image_column=args.image_column, label_column=args.label_column,
        ood_image_column=args.ood_image_column, output=args.output, bootstrap=args.bootstrap,
        batch_size=args.batch_size, budget=args.budget, measure_budget=args.measure_budget,
        num_threads=args.num_threads, cpu=args.cpu, report=args.report, progress=not args.quiet,
        command=None if argv is None else "hf-uq " + shlex.join(argv),
    )
    if results is not None:
        print(f"hf-uq evaluate: wrote {args.output}/results.json ({len(results['routes'])} routes)")
    return 0
