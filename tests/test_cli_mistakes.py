"""A user's mistake is one line on stderr and a documented exit code, never
a traceback, for every ``quire`` command.

The commands are enumerated from the parser itself, so a command added
later is driven too: each with bad input (unknown ids, a missing file, a
file that is not a PDF), with no stack and with a stack that does not
answer; every option that takes a value with a value it cannot take;
``quire verify`` with a text file, a truncated PDF and a signed PDF with one
byte changed (wherever it is); against the real stack, every command that
names a job, batch or rollout with one that does not exist.

Most cases run ``quire.cli.main.main`` in this process (the same parser,
command, error mapping and exit code, without an interpreter started for
each); what only a process of its own shows (gRPC's C-core log lines,
libraries logging a traceback, ``quire up``) runs as one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from quire.blobstore import sha256_file
from quire.cli.exitcodes import ExitCode
from quire.cli.main import main as quire_main
from quire.cli.parser import build_parser
from quire.database import Database
from quire.signer import tables as signer_tables
from quire.signer.keystore import GeneratedKeys, KeyStore
from quire.signer.signing import sign_packet
from quire.stack.info import StackInfo
from quire.stack.ports import free_port
from quire.testing.pdfs import write_text_pdf
from quire.testing.pki import TestCA
from quire.testing.quirecli import QUIRE, ROOT, run_quire

DOCUMENTED = {int(code) for code in ExitCode} - {int(ExitCode.OK)}
NAMED = {"job", "other", "batch", "subject", "rollout", "token"}
"""Arguments that name something the stack holds (or not)."""
UNKNOWN_JOB = "jobs/ffffffffffffffffffffffffffffffff"
UNKNOWN_BATCH = "batches/" + "f" * 32
CLEARED = (
    "QUIRE_TOKEN",
    "QUIRE_OPERATOR_TOKEN",
    "QUIRE_ADMISSION_ADDR",
    "QUIRE_SIGNER_ADDR",
    "QUIRE_AUDIT_ADDR",
    "QUIRE_VALIDATOR_ADDR",
    "QUIRE_ASSEMBLER_ADDR",
    "QUIRE_NATS_URL",
    "QUIRE_NATS_PASSWORD_FILE",
    "QUIRE_KEK_FILE",
    "QUIRE_TLS_CERT_FILE",
    "QUIRE_TLS_KEY_FILE",
    "QUIRE_TLS_CA_FILE",
)
"""What would point a command at a stack other than the one a case sets up."""


# argparse has no public way to walk a parser: its private fields it is.
def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every runnable command: (its words, its parser)."""
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, child in action.choices.items():
                yield from _leaves(child, (*path, name))
            return
    yield path, parser


COMMANDS = dict(_leaves(build_parser()))
IN_PROCESS = sorted(words for words in COMMANDS if words != ("up",))
"""``quire up`` starts services: it runs as a process of its own below."""


def _bad_value(action: argparse.Action, folder: Path) -> str:
    """A wrong value for a positional or a required option, by what it names."""
    if action.choices:
        return str(next(iter(action.choices)))
    return {
        "job": UNKNOWN_JOB,
        "other": "jobs/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
        "file": str(folder / "notes.txt"),
        "batch": UNKNOWN_BATCH,
        "subject": UNKNOWN_JOB,
        "tenant": "tenants/nope",
        "token": "tenants/nope/tokens/nope",
        "rollout": "rollouts/nope",
        "url": "https://hooks.invalid/quire",
        "ring": str(folder / "missing" / "ring"),
        "directory": "/dev/null/quire",
        "source": str(folder / "missing"),
        "output": str(folder / "out.pdf"),
        "share": "10%",
        "cap": "1",
    }.get(action.dest, "no-such-thing")


def _argv(words: tuple[str, ...], folder: Path, *, naming: bool = False) -> list[str]:
    """The command with a wrong value for each required argument (and, when
    ``naming``, for an optional one that names a job, batch or rollout)."""
    argv = list(words)
    for action in COMMANDS[words]._actions:  # noqa: SLF001
        if action.option_strings:
            if action.required:
                argv += [action.option_strings[-1], _bad_value(action, folder)]
        elif action.nargs not in ("?", "*") or (naming and action.dest in NAMED):
            argv.append(_bad_value(action, folder))
    return argv


@dataclass(frozen=True)
class Ran:
    code: int | None
    out: str
    err: str
    escaped: str
    """The traceback of an exception that left ``main``: a process would print it."""


def _run(capfd: pytest.CaptureFixture[str], data_dir: Path, *argv: str) -> Ran:
    capfd.readouterr()
    escaped = ""
    code: int | None
    try:
        code = quire_main(["--data-dir", str(data_dir), *argv])
    except SystemExit as exit_:
        code = int(exit_.code) if isinstance(exit_.code, int) else None
    except BaseException:  # noqa: BLE001 - what the test is looking for
        code, escaped = None, traceback.format_exc()
    printed = capfd.readouterr()
    return Ran(code, printed.out, printed.err, escaped)


def _said_once(ran: Ran | subprocess.CompletedProcess[str], *argv: str) -> str:
    """The failure was one error line (and indented detail lines), with a
    documented non-zero code; the line."""
    if isinstance(ran, Ran):
        code, err, escaped = ran.code, ran.err, ran.escaped
    else:
        code, err, escaped = ran.returncode, ran.stderr, ""
    assert not escaped, f"{argv}: an exception left main:\n{escaped}"
    assert "Traceback" not in err, f"{argv}:\n{err}"
    assert code in DOCUMENTED, f"{argv}: exit {code}\n{err}"
    lines = err.rstrip("\n").splitlines()
    assert lines, f"{argv}: exit {code} and nothing said"
    assert lines[0].startswith(("error: ", "quire")) and ": error: " in f": {lines[0]}", (
        argv,
        err,
    )
    assert all(line.startswith("  ") for line in lines[1:]), f"{argv}:\n{err}"
    return lines[0]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_stack(tmp_path: Path, clean_env: None) -> Path:
    """A data directory no stack ever ran in."""
    (tmp_path / "notes.txt").write_text("not a PDF\n")
    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    return data_dir


@pytest.fixture
def dead_stack(tmp_path: Path, clean_env: None) -> Path:
    """A data directory whose ``stack.json`` names addresses nothing listens on."""
    (tmp_path / "notes.txt").write_text("not a PDF\n")
    data_dir = tmp_path / "dead"
    data_dir.mkdir()
    (data_dir / "token").write_text("qt_dead\n")
    (data_dir / "operator-token").write_text("qt_dead_operator\n")
    address = f"127.0.0.1:{free_port()}"
    StackInfo(
        data_dir=str(data_dir),
        nats_url=f"nats://127.0.0.1:{free_port()}",
        endpoints={s: address for s in ("admission", "validator", "signer", "audit", "assembler")},
        token_file=str(data_dir / "token"),
        operator_token_file=str(data_dir / "operator-token"),
        metrics_endpoints={"admission": address},
    ).write()
    return data_dir


@pytest.mark.parametrize("words", IN_PROCESS, ids=" ".join)
def test_every_command_without_a_stack_says_so_in_one_line(
    words: tuple[str, ...], no_stack: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = _argv(words, no_stack.parent)
    _said_once(_run(capfd, no_stack, *argv), *argv)
    # A stack file cut short (a full disk, an editor) is a mistake too.
    (no_stack / "stack.json").write_text('{"data_dir": "/x", "endpoints": {')
    _said_once(_run(capfd, no_stack, *argv), "with a broken stack.json", *argv)


@pytest.mark.parametrize("words", IN_PROCESS, ids=" ".join)
def test_every_command_against_a_stack_that_does_not_answer_says_so_in_one_line(
    words: tuple[str, ...], dead_stack: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = _argv(words, dead_stack.parent)
    ran = _run(capfd, dead_stack, *argv)
    _said_once(ran, *argv)
    as_json = _run(capfd, dead_stack, "--json", *argv)
    _said_once(as_json, "--json", *argv)
    assert as_json.code == ran.code
    error = json.loads(as_json.out)["error"]
    assert error["exit_code"] == ran.code and error["message"]


def _valued_options() -> list[tuple[tuple[str, ...], str]]:
    """(command, option) for every option that converts or restricts its value."""
    found = []
    for words, parser in COMMANDS.items():
        for action in parser._actions:  # noqa: SLF001
            if action.option_strings and (action.type is not None or action.choices):
                found.append((words, action.option_strings[-1]))
    return found


def test_every_option_refuses_a_value_it_cannot_take(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: None
) -> None:
    options = _valued_options()
    assert len(options) > 10, "the walk found the typed options"
    for words, option in options:
        argv = [*_argv(words, tmp_path), option, "not-a-value"]
        ran = _run(capfd, tmp_path, *argv)
        line = _said_once(ran, *argv)
        assert ran.code == ExitCode.USAGE and option in line, (argv, ran.err)


@pytest.mark.parametrize(
    "flag", ["--sources-days", "--packets-days", "--artifacts-days", "--unused-upload-hours"]
)
@pytest.mark.parametrize("value", ["0", "-1", "0.0"])
def test_a_retention_period_of_zero_or_less_is_refused_not_taken_for_the_default(
    flag: str, value: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: None
) -> None:
    ran = _run(capfd, tmp_path, "tenants", "retention", "tenants/t", flag, value)
    line = _said_once(ran)
    assert ran.code == ExitCode.USAGE and "more than 0" in line
    helped = COMMANDS[("tenants", "retention")].format_help()
    assert "0 is refused" in " ".join(helped.split())


# quire verify: a file is anything.


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A packet signed by a fresh key, and that key's certificate."""
    folder = tmp_path_factory.mktemp("signed")
    database = Database(f"sqlite:///{folder / 'signer.db'}", signer_tables.metadata)
    database.create_schema()
    key = KeyStore(database, GeneratedKeys(folder / "keys")).ensure_active_key()
    database.close()
    packet = write_text_pdf(folder / "packet.pdf", ["one", "two"])
    output = folder / "signed.pdf"
    sign_packet(str(packet), sha256_file(packet)[0], str(output), key.key_path, key.cert_path)
    return output, Path(key.cert_path)


def test_verify_says_what_is_wrong_with_a_file_that_is_not_a_signed_pdf(
    signed: tuple[Path, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: None
) -> None:
    output, cert = signed
    text = tmp_path / "notes.txt"
    text.write_text("not a PDF\n")
    whole = output.read_bytes()
    (tmp_path / "cut.pdf").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "empty.pdf").write_bytes(b"")
    for path in (text, tmp_path / "cut.pdf", tmp_path / "empty.pdf"):
        ran = _run(capfd, tmp_path, "verify", str(path), "--cert", str(cert))
        line = _said_once(ran, str(path))
        assert ran.code == ExitCode.FAILED and f"cannot verify {path}" in line
    not_a_cert = _run(capfd, tmp_path, "verify", str(output), "--cert", str(text))
    assert "not a PEM certificate" in _said_once(not_a_cert)
    assert not_a_cert.code == ExitCode.USAGE
    intact = _run(capfd, tmp_path, "verify", str(output), "--cert", str(cert))
    assert intact.code == ExitCode.OK and "OK" in intact.out, "the control case verifies"


def test_verify_answers_for_a_signed_pdf_with_any_one_byte_changed(
    signed: tuple[Path, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: None
) -> None:
    """Outside the signature's own hex string every change is NOT VERIFIED
    (exit 1); inside it (the bytes a PDF signature excludes from what it
    signs) a change may leave the signature valid. Never a traceback."""
    output, cert = signed
    data = output.read_bytes()
    contents = data.index(b"/Contents <") + len(b"/Contents <")
    excluded = range(contents, data.index(b">", contents))
    changed = tmp_path / "changed.pdf"
    positions = sorted({*range(0, len(data), max(len(data) // 120, 1)), len(data) - 2})
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 0x01
        changed.write_bytes(bytes(flipped))
        ran = _run(capfd, tmp_path, "verify", str(changed), "--cert", str(cert))
        if ran.code == ExitCode.OK:
            assert position in excluded, f"byte {position} changed and still verified"
            continue
        assert ran.code == ExitCode.FAILED, (position, ran.err, ran.escaped)
        assert not ran.escaped and "Traceback" not in ran.err, (position, ran.escaped, ran.err)
        if ran.err:
            _said_once(ran, str(position))
        else:
            assert "NOT VERIFIED" in ran.out, position


def test_verify_of_a_damaged_signature_prints_no_library_traceback(
    signed: tuple[Path, Path], tmp_path: Path
) -> None:
    """pyHanko logs a traceback (through logging) when a signature's
    SubFilter is damaged, then goes on; the ``quire`` program keeps it off
    the terminal."""
    output, cert = signed
    data = bytearray(output.read_bytes())
    data[data.index(b"/ETSI.CAdES.detached") + 2] ^= 0x01
    damaged = tmp_path / "damaged.pdf"
    damaged.write_bytes(bytes(data))
    shown = run_quire(tmp_path, "verify", str(damaged), "--cert", str(cert))
    assert shown.returncode == ExitCode.FAILED, shown.stdout + shown.stderr
    assert "Traceback" not in shown.stderr and "SubFilter" not in shown.stderr, shown.stderr
    text = tmp_path / "notes.txt"
    text.write_text("not a PDF\n")
    plain = run_quire(tmp_path, "verify", str(text), "--cert", str(cert))
    assert plain.returncode == ExitCode.FAILED
    assert "not a readable PDF" in _said_once(plain)


# What only a process of its own shows.


@pytest.fixture
def not_tls() -> Iterator[str]:
    """A loopback address that answers a TLS handshake with plain text (a
    port that is not the stack's): gRPC's C core logs the failed handshake."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    thread.join(timeout=5)


def _status(tmp_path: Path, address: str, **extra: str) -> subprocess.CompletedProcess[str]:
    ca = TestCA(tmp_path / "pki")
    cert, key = ca.issue("quire-cli")
    env = {k: v for k, v in os.environ.items() if k not in CLEARED and k != "GRPC_VERBOSITY"}
    env.update(
        QUIRE_ADMISSION_ADDR=address,
        QUIRE_TOKEN="qt_x",
        QUIRE_TLS_CERT_FILE=str(cert),
        QUIRE_TLS_KEY_FILE=str(key),
        QUIRE_TLS_CA_FILE=str(ca.ca_file),
        **extra,
    )
    return subprocess.run(
        [*QUIRE, "--data-dir", str(tmp_path), "status", UNKNOWN_JOB],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def test_an_unreachable_endpoint_shows_no_grpc_core_log_line(tmp_path: Path, not_tls: str) -> None:
    quiet = _status(tmp_path, not_tls)
    assert quiet.returncode == ExitCode.UNREACHABLE, quiet.stderr
    assert "cannot reach the stack" in _said_once(quiet)
    assert ".cc:" not in quiet.stderr, quiet.stderr
    # The same call with gRPC's logging asked for: the C core does log it,
    # so the line above was kept away, not never written.
    loud = _status(tmp_path, not_tls, GRPC_VERBOSITY="INFO")
    assert loud.returncode == ExitCode.UNREACHABLE
    assert "ssl_transport_security.cc" in loud.stderr, loud.stderr

    unresolvable = _status(tmp_path, "no-such-host.invalid:50051")
    assert unresolvable.returncode == ExitCode.UNREACHABLE
    assert "cannot reach the stack" in _said_once(unresolvable)


def test_up_with_a_missing_example_is_refused_before_anything_starts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shown = run_quire(data_dir, "up", "--example", str(tmp_path / "no-example"))
    assert shown.returncode == ExitCode.USAGE, shown.stdout + shown.stderr
    assert "no-example" in _said_once(shown)
    assert not (data_dir / "stack.json").exists(), "no stack was started"


# Against the real stack: ids that do not exist.


def _naming_commands() -> list[tuple[str, ...]]:
    """The commands with a positional that names a job, batch, rollout or token."""
    return [
        words
        for words in IN_PROCESS
        if any(
            not action.option_strings and action.dest in NAMED
            for action in COMMANDS[words]._actions  # noqa: SLF001
        )
    ]


@pytest.mark.stack
def test_every_command_naming_what_does_not_exist_says_not_found(
    stack: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: None
) -> None:
    commands = _naming_commands()
    assert ("diff",) in commands and ("status",) in commands, "the walk found them"
    (tmp_path / "notes.txt").write_text("not a PDF\n")
    answered: dict[str, str] = {}
    for words in commands:
        argv = _argv(words, tmp_path, naming=True)
        ran = _run(capfd, stack.data_dir, *argv)
        answered[" ".join(argv)] = _said_once(ran, *argv)
        assert ran.code == ExitCode.REFUSED, (argv, ran.err)
    not_found = [argv for argv, line in answered.items() if "NOT_FOUND" not in line]
    assert not_found == [], answered
