"""The ``quire`` command in a script: documented exit codes, one JSON document
with ``--json``, ``--version``, one line (never a traceback) for a user's
mistake, help on every option, and one stack per data directory.

Each case runs the real CLI as a separate process, against the session's
embedded stack where a stack is needed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from quire.cli.exitcodes import ExitCode
from quire.cli.parser import build_parser
from quire.stack.datadirlock import LOCK_FILE
from quire.stack.ports import free_port
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT, run_quire


def _one_line_no_traceback(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# argparse has no public way to walk a parser: its private fields it is.
def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return list(parser._actions)  # noqa: SLF001


def _subcommands(action: argparse.Action) -> list[argparse.Action] | None:
    """The ``add_parser`` entries (with their help) of a subcommand action."""
    if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
        return list(action._choices_actions)  # noqa: SLF001
    return None


def _parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in _actions(parser):
        if _subcommands(action) is not None:
            assert isinstance(action.choices, dict)
            for child in action.choices.values():
                found += _parsers(child)
    return found


def test_every_command_and_option_has_help() -> None:
    missing = []
    for prog, parser in _parsers(build_parser()):
        for action in _actions(parser):
            if not action.help:
                missing.append(f"{prog} {'/'.join(action.option_strings) or action.dest}")
            for choice in _subcommands(action) or []:
                if not choice.help:
                    missing.append(f"{prog} {choice.dest}")
    checked = sum(len(_actions(parser)) for _, parser in _parsers(build_parser()))
    assert checked > 100, "the walk reached every subcommand"
    assert missing == []


def test_every_commands_help_renders() -> None:
    """argparse formats help with %: a lone % in a help text breaks ``--help``."""
    broken = []
    for prog, parser in _parsers(build_parser()):
        try:
            parser.format_help()
        except (ValueError, TypeError, KeyError) as error:
            broken.append(f"{prog}: {type(error).__name__}")
    assert broken == []


def test_version_and_the_exit_codes_in_help(tmp_path: Path) -> None:
    version = run_quire(tmp_path, "--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"quire {importlib.metadata.version('quire-ops')}"
    helped = run_quire(tmp_path, "--help")
    assert helped.returncode == 0
    epilog = helped.stdout[helped.stdout.index("exit codes:") :]
    for code in ExitCode:
        assert f"{code.value:>3}  {code.name}" in epilog
    assert len({int(code) for code in ExitCode}) == len(ExitCode), "each code means one thing"


def test_a_users_mistakes_are_one_line_and_exit_usage(tmp_path: Path) -> None:
    bad_state = run_quire(tmp_path, "jobs", "--state", "DONE")
    assert bad_state.returncode == ExitCode.USAGE
    assert "unknown state 'DONE'" in _one_line_no_traceback(bad_state)
    missing_cert = run_quire(tmp_path, "verify", str(tmp_path / "nope.pdf"), "--cert", "x.pem")
    assert missing_cert.returncode == ExitCode.USAGE
    assert "no such file" in _one_line_no_traceback(missing_cert)
    (tmp_path / "broken.json").write_text("{not json")
    evidence = run_quire(tmp_path, "evidence", "verify", str(tmp_path / "broken.json"), "--json")
    assert evidence.returncode == ExitCode.USAGE
    assert "is not JSON" in _one_line_no_traceback(evidence)
    assert json.loads(evidence.stdout)["error"]["kind"] == "USAGE"


def test_no_stack_and_a_dead_stack_exit_unreachable(tmp_path: Path) -> None:
    nothing = run_quire(tmp_path / "empty", "status", "jobs/0", "--json")
    assert nothing.returncode == ExitCode.UNREACHABLE
    assert "no running stack found" in _one_line_no_traceback(nothing)
    assert json.loads(nothing.stdout)["error"]["exit_code"] == ExitCode.UNREACHABLE

    dead = tmp_path / "dead"
    dead.mkdir()
    (dead / "token").write_text("qt_dead\n")
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    StackInfo(
        data_dir=str(dead),
        nats_url="nats://127.0.0.1:1",
        endpoints={s: address for s in ("admission", "validator", "signer", "audit")},
        token_file=str(dead / "token"),
    ).write()
    gone = run_quire(dead, "status", "jobs/0")
    assert gone.returncode == ExitCode.UNREACHABLE, gone.stderr
    assert "cannot reach the stack" in _one_line_no_traceback(gone)


@pytest.mark.stack
def test_against_the_stack_results_are_json_and_outcomes_have_their_codes(
    stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    data_dir = stack.data_dir
    good = write_text_pdf(tmp_path / "good.pdf", ["scripted"])
    submitted = run_quire(data_dir, "submit", str(good), "--wait", "--json")
    assert submitted.returncode == ExitCode.OK, submitted.stderr
    job = json.loads(submitted.stdout)["job"]
    assert job["state"] == "COMPLETED" and job["name"].startswith("jobs/")
    assert len(job["output_digest"]) == 64

    status = json.loads(run_quire(data_dir, "status", job["name"], "--json").stdout)
    assert status["job"]["output_digest"] == job["output_digest"]
    listed = run_quire(data_dir, "--json", "jobs", "--state", "completed")
    assert listed.returncode == 0
    assert job["name"] in {j["name"] for j in json.loads(listed.stdout)["jobs"]}
    output = tmp_path / "out.pdf"
    fetched = json.loads(
        run_quire(data_dir, "fetch", job["name"], "-o", str(output), "--json").stdout
    )
    assert fetched["sha256"] == job["output_digest"] and output.exists()
    verified = run_quire(data_dir, "verify", str(output), "--job", job["name"], "--json")
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["ok"] is True
    assert all(check["passed"] for check in report["ledger"]) and len(report["ledger"]) == 3

    whole = write_text_pdf(tmp_path / "cut.pdf", ["cut short"]).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(whole[: len(whole) // 2])
    rejected = run_quire(data_dir, "submit", str(tmp_path / "cut.pdf"), "--wait", "--json")
    assert rejected.returncode == ExitCode.REJECTED, rejected.stdout + rejected.stderr
    assert json.loads(rejected.stdout)["job"]["state"] == "REJECTED"

    slow = run_quire(data_dir, "submit", str(good), "--wait", "--timeout", "0.001")
    assert slow.returncode == ExitCode.TIMEOUT, slow.stderr
    assert "timed out" in _one_line_no_traceback(slow)
    assert slow.stdout.startswith("jobs/"), "the job accepted is still printed"

    missing_file = run_quire(data_dir, "submit", str(tmp_path / "absent.pdf"))
    assert missing_file.returncode == ExitCode.USAGE
    assert "no such file" in _one_line_no_traceback(missing_file)

    refused = run_quire(data_dir, "status", "jobs/ffffffffffffffff", "--json")
    assert refused.returncode == ExitCode.REFUSED
    assert "NOT_FOUND" in _one_line_no_traceback(refused)
    error = json.loads(refused.stdout)["error"]
    assert (error["status"], error["exit_code"]) == ("NOT_FOUND", ExitCode.REFUSED)
    assert error["reason"]


@pytest.mark.stack
def test_a_second_up_on_a_data_directory_in_use_is_refused(stack) -> None:  # type: ignore[no-untyped-def]
    data_dir = Path(stack.data_dir)
    before = (data_dir / "stack.json").read_text()
    second = subprocess.run(
        [*QUIRE, "up", "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "QUIRE_NATS_URL"},
    )
    assert second.returncode == ExitCode.DATA_DIR_IN_USE, second.stdout + second.stderr
    line = second.stderr.strip().splitlines()[-1]
    assert "in use by a running stack" in line and "Traceback" not in second.stderr
    assert f"pid {os.getpid()}" in line, "the holder is named"
    assert json.loads(second.stdout)["error"]["kind"] == "DATA_DIR_IN_USE"
    assert (data_dir / "stack.json").read_text() == before, "nothing of the live stack changed"
    assert (data_dir / LOCK_FILE).exists()
    still = run_quire(data_dir, "jobs")
    assert still.returncode == 0, "the running stack still serves"


def _run_with_terminal_stderr(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run quire with stderr on a pseudo-terminal (as a person's shell has it)
    and stdout on a pipe (as a script's ``$(...)`` has it)."""
    main, terminal = os.openpty()
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the terminal's last writer is gone
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        result = subprocess.run(
            [*QUIRE, *args],
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "TERM": "xterm", "COLUMNS": "100"},
        )
    finally:
        os.close(terminal)
        reader.join(timeout=10)
        os.close(main)
    return result, seen.decode(errors="replace")


@pytest.mark.stack
def test_progress_goes_to_a_terminal_stderr_and_never_to_stdout_or_json(
    stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    pdf = write_text_pdf(tmp_path / "progress.pdf", ["progress"])
    data_dir = str(stack.data_dir)
    shown, terminal = _run_with_terminal_stderr(
        "--data-dir", data_dir, "submit", str(pdf), "--wait"
    )
    assert shown.returncode == 0, terminal
    assert "waiting for jobs/" in terminal, "a spinner while the job runs"
    lines = shown.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("jobs/") for line in lines), shown.stdout
    assert "\x1b" not in shown.stdout, "no escape codes in the result"

    quiet, terminal = _run_with_terminal_stderr(
        "--data-dir", data_dir, "submit", str(pdf), "--wait", "--json"
    )
    assert quiet.returncode == 0, terminal
    assert json.loads(quiet.stdout)["job"]["state"] == "COMPLETED"
    assert "waiting for" not in terminal and "uploading" not in terminal
