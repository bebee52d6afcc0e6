"""The ``quire`` command line: every command, option and its help.

Errors in the arguments are one line on stderr (exit 2), not argparse's
usage block: scripts log stderr, and people get the hint to ask ``--help``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from pathlib import Path
from typing import NoReturn, Protocol

from quire.cli.deadletterargs import BUDGET_HELP, budget_duration
from quire.cli.evidenceargs import add_evidence_arguments
from quire.cli.exitcodes import ExitCode, epilog
from quire.cli.jobstates import job_state
from quire.cli.operatorargs import (
    WEIGHT_HELP,
    add_check_arguments,
    add_keys_arguments,
    add_provision_arguments,
    add_retention_arguments,
    add_sources_arguments,
    add_tenant_limits_arguments,
    add_tenant_retention_arguments,
    add_workers_arguments,
)
from quire.cli.rolloutargs import add_rollout_arguments
from quire.top.arguments import add_top_arguments

__all__ = ["DEFAULT_DATA_DIR", "build_parser", "version"]

DEFAULT_DATA_DIR = Path(".quire")
DESCRIPTION = """\
Quire: run the stack, send packets, follow jobs, check signatures.

  quire up [--example DIR]                  quire submit FILE... | --manifest M.json [--wait]
  quire status JOB   quire wait JOB         quire fetch JOB -o OUT.pdf   quire verify OUT.pdf

Every command that prints a result prints it as one JSON document with --json."""


def version() -> str:
    try:
        return importlib.metadata.version("quire-ops")
    except importlib.metadata.PackageNotFoundError:  # run from a bare checkout
        return "unknown"


class _Command(Protocol):
    """The ``command(name, help=...)`` helper: a subcommand with the common options."""

    def __call__(self, name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002
        ...


class QuireParser(argparse.ArgumentParser):
    """argparse, with one line per error instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(ExitCode.USAGE)


def _common() -> QuireParser:
    """Options accepted after the subcommand too (``quire status JOB --json``)."""
    common = QuireParser(add_help=False)
    common.add_argument("--data-dir", default=argparse.SUPPRESS, help="stack data directory")
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the result as one JSON document on stdout",
    )
    return common


REQUEST_ID_HELP = (
    "this call's id (default: a fresh UUID); run again with the same id to retry"
    " safely: the first answer is returned and nothing is done twice"
)


def _once() -> QuireParser:
    """``--request-id`` for the commands that change something (AIP-155)."""
    once = QuireParser(add_help=False)
    once.add_argument("--request-id", default=None, help=REQUEST_ID_HELP)
    return once


def build_parser() -> argparse.ArgumentParser:
    parser = QuireParser(
        prog="quire",
        description=DESCRIPTION,
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"quire {version()}")
    parser.add_argument(
        "--data-dir",
        default=str(DEFAULT_DATA_DIR),
        help="stack data directory (default: .quire)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the result as one JSON document on stdout"
    )
    common = _common()
    commands = parser.add_subparsers(dest="command", required=True, help="what to do")

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's word
        return commands.add_parser(name, help=help, description=help, parents=[common])

    up = command("up", help="start the embedded stack")
    up.add_argument("--example", help="send the example packet in this folder once up")
    _job_commands(command)
    _batch_commands(command, common)
    _notification_commands(command, common)
    _operator_commands(command, common)
    add_top_arguments(command("top", help="operators: each stage's queue and work, live"))
    add_workers_arguments(
        command("workers", help="operators: the running processes by service and version")
    )
    return parser


def _job_commands(command: _Command) -> None:
    submit = command("submit", help="send a packet: files in order, or --manifest")
    submit.add_argument(
        "files",
        nargs="*",
        help="the sources, in page order: PDF files, or structured sources as .json files"
        " (rendered by the render profile)",
    )
    submit.add_argument("--manifest", help="a manifest JSON file naming the files instead")
    submit.add_argument(
        "--ruleset",
        default="",
        metavar="NAME[@VERSION]",
        help="the ruleset the validator applies (default: the manifest's, else the default)",
    )
    submit.add_argument(
        "--render-profile",
        default="",
        metavar="PROFILE",
        help="how structured sources are rendered: simple, strict, simple-fillable or"
        " strict-fillable (default: the manifest's, else simple)",
    )
    submit.add_argument("--wait", action="store_true", help="wait for the job to end")
    submit.add_argument(
        "--timeout", type=float, default=120.0, help="with --wait: give up after this many seconds"
    )
    command("status", help="a job's state").add_argument("job", help="the job id or jobs/ID")
    wait = command("wait", help="wait for a job to end")
    wait.add_argument("job", help="the job id or jobs/ID")
    wait.add_argument(
        "--timeout", type=float, default=120.0, help="give up after this many seconds"
    )
    fetch = command("fetch", help="download a completed job's signed PDF")
    fetch.add_argument("job", help="the job id or jobs/ID")
    fetch.add_argument("-o", "--output", required=True, help="where to write the signed PDF")
    verify = command("verify", help="check a signed PDF against the stack's keys")
    verify.add_argument("file", help="the signed PDF")
    verify.add_argument("--job", help="also check the file against this job's ledger record")
    verify.add_argument(
        "--cert",
        action="append",
        default=[],
        help="offline: trust this PEM certificate instead of asking the stack (repeatable)",
    )
    jobs = command("jobs", help="your jobs, newest first")
    jobs.add_argument("--state", type=job_state, help="only jobs in this state, e.g. COMPLETED")
    cancel = command("cancel", help="cancel a job that has not started signing")
    cancel.add_argument("job", help="the job id or jobs/ID")
    cancel.add_argument("--request-id", default=None, help=REQUEST_ID_HELP)


def _batch_commands(command: _Command, common: argparse.ArgumentParser) -> None:
    batch = command("batch", help="a portfolio of packets as one batch").add_subparsers(
        dest="action", required=True, help="what to do"
    )
    submit = batch.add_parser(
        "submit", parents=[common, _once()], help="send a folder of packet folders, or a manifest"
    )
    submit.add_argument(
        "source",
        help="a folder whose subfolders are packets (each a manifest.json, or its PDFs in name"
        ' order), or a JSON manifest {"packets": [{bundle_id, items: [{position, document_id,'
        " file or sha256}]}]}",
    )
    status = batch.add_parser("status", parents=[common], help="a batch's jobs by state")
    for waits in (submit, status):
        waits.add_argument("--wait", action="store_true", help="wait for the batch to finish")
        waits.add_argument(
            "--timeout",
            type=float,
            default=600.0,
            help="with --wait: give up after this many seconds",
        )
    status.add_argument("batch", help="the batch id or batches/ID")
    batch.add_parser(
        "cancel", parents=[common, _once()], help="stop the packets not yet dispatched"
    ).add_argument("batch", help="the batch id or batches/ID")
    batch.add_parser(
        "jobs", parents=[common], help="each packet: index, bundle id, job, state"
    ).add_argument("batch", help="the batch id or batches/ID")


def _notification_commands(command: _Command, common: argparse.ArgumentParser) -> None:
    notifications = command(
        "notifications", help="a signed POST to your URL when a job or batch ends"
    ).add_subparsers(dest="action", required=True, help="what to do")
    put = notifications.add_parser(
        "set", parents=[common, _once()], help="register the callback URL (empty: remove it)"
    )
    put.add_argument("url", help='https://... (http only to loopback where allowed); "" removes')
    put.add_argument(
        "--rotate-secret", action="store_true", help="make a new HMAC secret; the old one stops"
    )
    notifications.add_parser("show", parents=[common], help="the registered URL")
    notifications.add_parser(
        "attempts", parents=[common], help="every delivery try of one job's or batch's notification"
    ).add_argument("subject", help="a job id, jobs/ID or batches/ID")


def _operator_commands(command: _Command, common: argparse.ArgumentParser) -> None:
    tenants = command("tenants", help="operators: tenants").add_subparsers(
        dest="action", required=True, help="what to do"
    )
    once = _once()
    create = tenants.add_parser("create", parents=[common, once], help="a new tenant and its token")
    create.add_argument("name", help="the tenant's display name")
    create.add_argument(
        "--max-upload-bytes", type=int, default=0, help="largest upload (0: the default)"
    )
    create.add_argument(
        "--max-outstanding-jobs", type=int, default=0, help="unfinished jobs (0: the default)"
    )
    create.add_argument(
        "--storage-quota-bytes", type=int, default=0, help="bytes of uploads it may keep"
    )
    create.add_argument("--weight", type=int, default=0, help=WEIGHT_HELP)
    add_tenant_limits_arguments(tenants, [common, once])
    tenants.add_parser("list", parents=[common], help="every tenant, its limits and tokens")
    add_tenant_retention_arguments(tenants, common)
    add_sources_arguments(
        command("sources", help="operators: the source systems a tenant's manifests may name"),
        common,
    )
    add_rollout_arguments(
        command("rollout", help="operators: canary a stage's candidate, promote or roll back"),
        common,
        once,
    )
    tokens = command("tokens", help="operators: bearer tokens").add_subparsers(
        dest="action", required=True, help="what to do"
    )
    tokens.add_parser(
        "create", parents=[common, once], help="a new token for a tenant, or a reviewer's"
    ).add_argument(
        "tenant",
        help="tenants/ID, or reviewers for a reviewer's token (review calls only)",
    )
    tokens.add_parser("revoke", parents=[common, once], help="revoke a token").add_argument(
        "token", help="tenants/ID/tokens/ID, or reviewers/-/tokens/ID"
    )
    review = command("review", help="operators: jobs parked for review").add_subparsers(
        dest="action", required=True, help="what to do"
    )
    review.add_parser("list", parents=[common], help="jobs waiting for a decision")
    for decision in ("approve", "reject"):
        decide = review.add_parser(
            decision, parents=[common, once], help=f"{decision} a parked job"
        )
        decide.add_argument("job", help="the job id or jobs/ID")
        decide.add_argument("--note", required=True, help="why (recorded in the ledger)")
        decide.add_argument(
            "--operator",
            default="",
            help="ignored: the ledger records the token you decide with (kept for old scripts)",
        )
    audit = command("audit", help="operators: the ledger").add_subparsers(
        dest="action", required=True, help="what to do"
    )
    audit.add_parser("verify", parents=[common], help="check every chain and checkpoint")
    audit.add_parser(
        "history", parents=[common], help="one job's transitions, as the ledger holds them"
    ).add_argument("job", help="the job id or jobs/ID")
    audit.add_parser(
        "key", parents=[common], help="audit's checkpoint public key and its pin, for verifiers"
    )
    witness = command(
        "witness", help="the witness that cosigns audit's checkpoints (in the signer)"
    ).add_subparsers(dest="action", required=True, help="what to do")
    witness.add_parser(
        "key", parents=[common], help="the witness's verifier key, for `quire evidence verify`"
    )
    dlq = command("dlq", help="operators: jobs that ended FAILED").add_subparsers(
        dest="action", required=True, help="what to do"
    )
    listing = dlq.add_parser("list", parents=[common], help="dead letters still open")
    listing.add_argument("--all", action="store_true", help="include retried and discarded")
    listing.add_argument("--limit", type=int, default=100, help="at most this many")
    retry = dlq.add_parser(
        "retry", parents=[common, once], help="a new attempt, recorded in the ledger"
    )
    retry.add_argument("job", help="the job id or jobs/ID")
    retry.add_argument("--budget", type=budget_duration, default=None, help=BUDGET_HELP)
    dlq.add_parser("discard", parents=[common, once], help="leave the job FAILED").add_argument(
        "job", help="the job id or jobs/ID"
    )
    command(
        "diagnose", help="operators: the error texts the stages kept for a job, and who read them"
    ).add_argument("job", help="the job id or jobs/ID")
    compared = command("diff", help="operators: two jobs' pinned inputs and outcomes, compared")
    compared.add_argument("job", help="a job id or jobs/ID")
    compared.add_argument("other", help="the job to compare it with")
    add_evidence_arguments(
        command("evidence", help="a job's evidence: export it, or verify a file offline"), common
    )
    add_check_arguments(
        command("check", help="operators: check every invariant over the data directory")
    )
    add_retention_arguments(
        command("retention", help="operators: retire stored bytes under the retention policy"),
        common,
    )
    add_keys_arguments(
        command("keys", help="operators: the signing key, tenants' data keys and KEKs"),
        common,
        once,
    )
    add_provision_arguments(
        command("credentials", help="operators: identity keys and NATS logins for a cluster"),
        command("nats", help="operators: lay out the queue topology"),
        common,
    )
