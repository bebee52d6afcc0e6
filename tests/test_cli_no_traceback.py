"""No `quire` command answers a user's mistake with a traceback: every
command the parser has (found from the parser itself, so a new one is
covered at once) is run with arguments that name nothing that exists,
against an address where no stack listens, and must end with one clear
error line and a documented exit code."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from quire.cli.exitcodes import ExitCode
from quire.cli.main import main
from quire.cli.parser import build_parser

NOWHERE = "127.0.0.1:1"
SKIPPED = {("up",), ("top",)}  # not run here
"""``up`` starts a stack and ``top`` draws a live screen until stopped:
their mistakes are tested with the stack they need (tests/test_cli.py)."""


def _commands() -> list[tuple[list[str], argparse.ArgumentParser]]:
    found = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        actions = [
            a
            for a in parser._actions  # noqa: SLF001 — argparse keeps its subcommands only here
            if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
        ]
        if not actions and path:
            found.append((path, parser))
        for action in actions:
            for name, child in action.choices.items():
                walk(child, [*path, name])

    walk(build_parser(), [])
    return found


def _bad_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """Each required argument given a value that names nothing that exists."""
    argv: list[str] = []
    for action in parser._actions:  # noqa: SLF001
        if action.option_strings and not action.required:
            continue
        if action.dest in ("help",) or action.nargs == 0:
            continue
        value = str(next(iter(action.choices))) if action.choices else "missing-0123"
        count = 1 if action.nargs in (None, "?", "+", 1) else 0
        if action.nargs == "*":
            count = 1
        if isinstance(action.nargs, int):
            count = action.nargs
        argv += [*action.option_strings[:1], *[value] * count]
    return argv


PATIENCE = {("wait",): ["--timeout", "2"]}
"""``wait`` rides out a stack that is away (a restart) until its timeout."""

COMMANDS = [
    pytest.param(path, parser, id=" ".join(path))
    for path, parser in _commands()
    if tuple(path) not in SKIPPED
]


def test_the_parser_has_the_commands_the_issue_names() -> None:
    names = {" ".join(path) for path, _ in _commands()}
    assert {"verify", "diff", "evidence export", "evidence verify", "keys status"} <= names
    assert len(names) > 40


@pytest.mark.parametrize(("path", "parser"), COMMANDS)
def test_a_mistake_is_one_line_and_an_exit_code(
    path: list[str],
    parser: argparse.ArgumentParser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("ADMISSION", "AUDIT", "SIGNER", "VALIDATOR", "ASSEMBLER"):
        monkeypatch.setenv(f"QUIRE_{name}_ADDR", NOWHERE)
    monkeypatch.setenv("QUIRE_TOKEN", "qt_not-a-token")
    monkeypatch.setenv("QUIRE_OPERATOR_TOKEN", "qt_not-an-operator")
    argv = [*path, *_bad_arguments(parser), "--data-dir", str(tmp_path / "none")]
    argv += PATIENCE.get(tuple(path), [])
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exited:  # argparse's own refusals
            code = exited.code if isinstance(exited.code, int) else ExitCode.USAGE
    said = stderr.getvalue()
    assert "Traceback" not in said, said
    assert code in {c.value for c in ExitCode}, (argv, code)
    if code != ExitCode.OK:
        assert said.strip(), f"{argv}: exit {code} with nothing said"
        assert ".cc:" not in said, f"gRPC's core logged: {said}"
