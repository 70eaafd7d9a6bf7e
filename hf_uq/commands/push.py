"""`hf-uq push DIR REPO_ID`: upload a saved model folder and its card to the Hub in one commit."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "push",
        help="Push a saved model folder (weights, config, processor, remote code, card, plots) to the Hub",
        description="Upload DIR to the Hub model repository REPO_ID in one commit: weights, config.json, the "
        "image processor config, the remote-code .py files, README.md (the uncertainty card; a minimal card when "
        "DIR has none: write one first with `hf-uq card`) and plots/. The repository is created if needed.",
    )
    parser.add_argument("model_dir", metavar="DIR", help="the saved model folder")
    parser.add_argument("repo_id", metavar="REPO_ID", help='"namespace/name", or "name" for your own namespace')
    parser.add_argument("--token", help="Hub token (default: the one saved by `hf auth login`)")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--revision", metavar="BRANCH", help="branch to push to (created when missing)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit-message", metavar="TEXT", help="the commit's summary")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..hub.push import folder_files, push_folder

    commit = push_folder(
        args.model_dir, args.repo_id, token=args.token, private=True if args.private else None,
        revision=args.revision, create_pr=args.create_pr, commit_message=args.commit_message,
    )
    files = folder_files(args.model_dir)
    note = "" if "README.md" in files else " + a minimal README.md (no card in DIR)"
    print(f"pushed {len(files)} files{note} to {args.repo_id}: {commit.pr_url or commit.commit_url}")
    return 0
