"""The `hf-uq` skeleton: help, one-line errors with exit status 2, HF_UQ_DEBUG tracebacks, interrupts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_uq import cli
from hf_uq.commands import CommandError


def _missing_model(tmp_path: Path) -> list[str]:
    return ["evaluate", "--model", str(tmp_path / "missing"), "--dataset", str(tmp_path), "--ood", str(tmp_path),
            "--output", str(tmp_path / "out")]


def test_no_command_prints_help_and_returns_2(capsys):
    assert cli.main([]) == cli.EXIT_BAD_INPUT == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: hf-uq") and "evaluate" in out


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    assert "evaluate" in capsys.readouterr().out


def test_unknown_command_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_UQ_DEBUG", raising=False)
    assert cli.main(_missing_model(tmp_path)) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == [f"hf-uq evaluate: error: Model folder '{tmp_path / 'missing'}' does not exist."]


def test_hf_uq_debug_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_UQ_DEBUG", "1")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cli.main(_missing_model(tmp_path))


@pytest.mark.parametrize("error,status,message", [
    (CommandError("first line\n   second   line"), 2, "hf-uq evaluate: error: first line second line"),
    (FileNotFoundError(2, "No such file or directory", "/x/y"), 2,
     "hf-uq evaluate: error: [Errno 2] No such file or directory: '/x/y'"),
    (ValueError(), 2, "hf-uq evaluate: error: ValueError"),
    (KeyboardInterrupt(), 130, "hf-uq evaluate: interrupted"),
])
def test_errors_of_a_command(tmp_path, capsys, monkeypatch, error, status, message):
    monkeypatch.delenv("HF_UQ_DEBUG", raising=False)

    def run(args):
        raise error

    monkeypatch.setattr("hf_uq.commands.evaluate.run", run)
    assert cli.main(_missing_model(tmp_path)) == status
    assert capsys.readouterr().err.strip() == message

