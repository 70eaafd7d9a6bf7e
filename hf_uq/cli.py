"""The `hf-uq` command line: thin argument parsing on top of the library.

Each subcommand lives in `hf_uq/commands/<name>.py` and exposes `register(subparsers)` (adds its parser, with
`set_defaults(run=...)`) and a `run(args) -> int`. Bad input raises `ValueError`, `FileNotFoundError` or
[`~hf_uq.commands.CommandError`] inside the library; here it becomes one line on stderr and exit status 2,
never a traceback. Set `HF_UQ_DEBUG=1` to see the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

#: Subcommands in the order `hf-uq --help` lists them.
COMMANDS: tuple[str, ...] = ("benchmark", "evaluate", "card", "push", "recommend")

#: Exit status for bad input (as argparse uses for bad arguments).
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    """The `hf-uq` parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="hf-uq",
        description="Measure, compress and publish the uncertainty of Hugging Face image classifiers.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"hf_uq.commands.{name}")
        except ModuleNotFoundError as error:  # a subcommand not shipped in this build
            if error.name != f"hf_uq.commands.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def _one_line(error: BaseException) -> str:
    if isinstance(error, FileNotFoundError) and error.filename and str(error.filename) not in str(error):
        message = f"{error.strerror or 'not found'}: {error.filename}"
    else:
        message = str(error) or type(error).__name__
    return " ".join(message.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `hf-uq` console script; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line as typed, for the `command` recorded in results.json
    if getattr(args, "run", None) is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    from .commands import CommandError

    try:
        return int(args.run(args) or 0)
    except (CommandError, ValueError, FileNotFoundError, NotADirectoryError) as error:
        if os.environ.get("HF_UQ_DEBUG"):
            raise
        print(f"hf-uq {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"hf-uq {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
