"""``quire evidence export|verify`` and the older ``quire evidence JOB``, and
``quire dlq retry --budget``: how the command line is read (no stack)."""

from __future__ import annotations

import argparse

import pytest

from quire.cli.deadletterargs import budget_duration
from quire.cli.evidenceargs import export_by_default
from quire.cli.parser import build_parser

JOB = "0123456789abcdef0123456789ab"


def _parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(export_by_default(list(argv)))


@pytest.mark.parametrize(
    "argv",
    [
        ("evidence", "export", JOB, "-o", "out.json"),
        ("evidence", JOB, "-o", "out.json"),  # the older form
        ("evidence", "-o", "out.json", JOB),
        ("evidence", "--json", JOB, "-o", "out.json"),
        ("--data-dir", "evidence", "evidence", JOB, "-o", "out.json"),  # a folder named so
    ],
)
def test_every_spelling_of_an_export_names_the_job(argv: tuple[str, ...]) -> None:
    args = _parsed(*argv)
    assert (args.command, args.action, args.job, args.output) == (
        "evidence",
        "export",
        JOB,
        "out.json",
    )


def test_verify_takes_the_file_and_export_is_never_a_job_id() -> None:
    args = _parsed("evidence", "verify", "job.json", "--key-sha256", "ab", "--tenant", "t")
    assert (args.action, args.file, args.key_sha256, args.tenant) == (
        "verify",
        "job.json",
        "ab",
        "t",
    )
    assert export_by_default(["evidence", "export", JOB]) == ["evidence", "export", JOB]
    assert export_by_default(["status", JOB]) == ["status", JOB], "other commands untouched"


def test_export_options_are_not_verify_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        _parsed("evidence", "export", JOB, "--key-sha256", "ab")
    assert refused.value.code == 2
    assert "unrecognized arguments: --key-sha256" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("90", 90.0), ("5m", 300.0), ("1.5h", 5400.0)]
)
def test_a_budget_is_a_positive_duration(text: str, seconds: float) -> None:
    assert budget_duration(text) == seconds
    assert _parsed("dlq", "retry", JOB, "--budget", text).budget == seconds


@pytest.mark.parametrize("text", ["0", "0s", "-5s", "soon", "1d", "", "nan"])
def test_a_budget_that_is_not_a_positive_duration_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        budget_duration(text)
