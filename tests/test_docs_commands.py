"""The commands the README and the documentation show are real: the README's
walkthrough runs, as written, against a stack started as `make run` starts
it; every `quire` command a page shows parses (its `--help`), and every
`make` target it names exists."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from quire.stack.natsserver import NatsServer
from quire.testing.quirecli import QUIRE, ROOT, read_until

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
WALKTHROUGH = "## Five minutes with a running stack"
_COMMAND = re.compile(r"(?:^ {4}|`)((?:\.venv/bin/)?quire [^`#\n]*)", re.MULTILINE)
_MAKE = re.compile(r"(?:^ {4}|`)make ([a-z][a-z0-9-]*)", re.MULTILINE)


def _walkthrough() -> list[str]:
    """The README walkthrough's command lines, in order."""
    text = README.read_text()
    section = text.split(WALKTHROUGH, 1)[1].split("\n## ", 1)[0]
    return [
        line.strip() for line in section.splitlines() if line.startswith("    .venv/bin/quire ")
    ]


def _command_path(line: str) -> list[str]:
    """The subcommand words of a shown `quire …` line: up to the first
    placeholder, option or argument that is not a plain lowercase word."""
    words = line.replace("[", " ").replace("]", " ").split()[1:]
    path = []
    for word in words:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            break
        path.append(word)
    return path


def test_the_walkthrough_is_the_readmes_and_short() -> None:
    assert len(README.read_text().splitlines()) < 300
    commands = _walkthrough()
    assert len(commands) >= 8, commands
    assert any(c.startswith(".venv/bin/quire submit") for c in commands)
    assert any(c.startswith(".venv/bin/quire evidence verify") for c in commands)


def test_every_quire_command_shown_is_one_the_cli_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from quire.cli.main import main

    shown = {
        tuple(_command_path(line))
        for page in [README, *PAGES]
        for line in _COMMAND.findall(page.read_text())
    }
    assert ("evidence", "verify") in shown and ("check",) in shown, "the pages were read"
    for path in sorted(shown):
        with pytest.raises(SystemExit) as exited:
            main([*path, "--help"])
        assert exited.value.code == 0, f"`quire {' '.join(path)}` is not a command"
    capsys.readouterr()


def test_every_make_target_shown_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.MULTILINE))
    shown = {target for page in [README, *PAGES] for target in _MAKE.findall(page.read_text())}
    assert {"run", "test", "docs", "bench"} <= shown
    assert shown <= targets, sorted(shown - targets)


@pytest.mark.stack
def test_the_readme_walkthrough_runs_as_written(tmp_path: Path, nats_server: NatsServer) -> None:
    """In a folder of its own, as a user's checkout: `make run`'s stack, then
    each walkthrough line, with the job, the pin and the witness key it names
    taken from the earlier lines' output."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = dict(os.environ, QUIRE_NATS_URL=nats_server.url, QUIRE_DRAIN_SECONDS="5")
    up = subprocess.Popen(
        [*QUIRE, "up", "--example", "examples/lease-renewal"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=env,
    )

    def run(line: str) -> str:
        done = subprocess.run(
            shlex.split(line), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr, line
        return done.stdout

    try:
        read_until(up, "serving; press Ctrl-C to stop", timeout=120)
        stack = json.loads((tmp_path / ".quire" / "stack.json").read_text())
        assert Path(stack["operator_token_file"]).is_file(), "stack.json names the operator token"
        names: dict[str, str] = {}
        key = run(".venv/bin/quire audit key")
        names["PIN"] = key.split("sha256 ")[1].split()[0]
        names["WITNESS"] = run(".venv/bin/quire witness key").strip()
        for line in _walkthrough():
            for placeholder, value in names.items():
                line = re.sub(rf"\b{placeholder}\b", value, line)
            printed = run(line)
            if line.startswith(".venv/bin/quire submit") and "JOB" not in names:
                names["JOB"] = printed.split()[0]
                assert names["JOB"].startswith("jobs/") and "COMPLETED" in printed
        assert (tmp_path / "packet.pdf").stat().st_size > 0
        assert (tmp_path / "job.json").stat().st_size > 0
    finally:
        up.send_signal(2)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


def test_every_page_the_readme_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert len(local) >= 20, local
    assert [link for link in local if not (ROOT / link).exists()] == []
