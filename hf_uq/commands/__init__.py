"""The `hf-uq` subcommands, one module each (see `hf_uq.cli`)."""

from __future__ import annotations


class CommandError(Exception):
    """Bad input to an `hf-uq` command: the CLI prints the message on one line and exits with status 2."""


__all__ = ["CommandError"]
