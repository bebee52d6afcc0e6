"""The ``quire`` command: run the stack, send packets, follow jobs, check signatures.

This module picks the command and turns what went wrong into one line on
stderr and a documented exit code (``quire.cli.exitcodes``); the commands
live beside it, the options in ``quire.cli.parser``. ``run`` is the program
(the ``quire`` script): it also quiets what libraries print on their own
(``quire.cli.quiet``) before gRPC loads; ``main`` runs one command in the
caller's process and changes nothing process-wide.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quire.cli.evidenceargs import export_by_default
from quire.cli.output import Output
from quire.cli.parser import build_parser
from quire.cli.quiet import quiet_grpc_core, quiet_library_logs

if TYPE_CHECKING:
    from quire.cli.config import ClientConfig

    StackCommand = Callable[[argparse.Namespace, ClientConfig, Output], Coroutine[Any, Any, int]]
    LocalCommand = Callable[[argparse.Namespace, Output], int]

__all__ = ["main", "run"]

# Each command is imported only when it runs, so that a quick command (or
# --version, or a typo) does not pay for importing every other one.
COMMANDS = {
    "submit": "jobcommands:submit",
    "status": "jobcommands:status",
    "wait": "jobcommands:wait",
    "fetch": "jobcommands:fetch",
    "verify": "jobcommands:verify",
    "jobs": "jobcommands:jobs",
    "cancel": "jobcommands:cancel",
    "batch submit": "batches:submit",
    "batch status": "batches:status",
    "batch cancel": "batches:cancel",
    "batch jobs": "batches:jobs",
    "notifications set": "notifications:set_endpoint",
    "notifications show": "notifications:show",
    "notifications attempts": "notifications:attempts",
    "tenants create": "operators:tenants_create",
    "tenants list": "operators:tenants_list",
    "tenants limits": "operators:tenants_limits",
    "tenants retention": "retention:tenants_retention",
    "retention apply": "retention:run_apply",
    "sources put": "sources:sources_put",
    "sources list": "sources:sources_list",
    "sources remove": "sources:sources_remove",
    "rollout start": "rollouts:rollout_start",
    "rollout status": "rollouts:rollout_status",
    "rollout promote": "rollouts:rollout_promote",
    "rollout rollback": "rollouts:rollout_rollback",
    "tokens create": "operators:tokens_create",
    "tokens revoke": "operators:tokens_revoke",
    "review list": "reviews:review_list",
    "review approve": "reviews:review_approve",
    "review reject": "reviews:review_reject",
    "audit verify": "ledger:audit_verify",
    "audit history": "history:audit_history",
    "audit key": "ledger:audit_key",
    "witness key": "ledger:witness_key",
    "dlq list": "deadletters:dlq_list",
    "dlq retry": "deadletters:dlq_retry",
    "dlq discard": "deadletters:dlq_discard",
    "evidence export": "ledger:evidence_export",
    "diff": "diff:diff",
    "diagnose": "diagnose:diagnose",
    "keys rotate": "signingkeys:keys_rotate",
}


def _load(target: str) -> Any:
    module, function = target.split(":")
    return getattr(importlib.import_module(f"quire.cli.{module}"), function)


def _local_command(args: argparse.Namespace) -> str | None:
    """Commands that need no running stack (they read files or start one)."""
    if args.command == "up":
        return "up:run"
    if args.command == "check":
        return "check:run"  # reads the data directory
    if args.command == "retention" and args.action == "plan":
        return "retention:run_plan"  # reads the data directory; changes nothing
    if args.command == "verify" and args.cert:
        return "jobcommands:verify_offline"  # the certificates given
    if args.command in ("credentials", "nats"):
        return "provision:run"
    if args.command == "top":
        return "top:run"  # the services' /metrics addresses, no gRPC
    if args.command == "workers":
        return "workers:run"  # the workers bucket, with an operator's NATS login
    if args.command == "keys" and args.action != "rotate":
        return "keys:run"  # the key ring beside the blobs
    if args.command == "evidence" and args.action == "verify":
        return "ledger:evidence_verify"  # offline
    return None


def _run(args: argparse.Namespace, out: Output) -> int:
    local = _local_command(args)
    if local is not None:
        command: LocalCommand = _load(local)
        return command(args, out)
    from quire.cli.config import ClientConfig

    config = ClientConfig.load(Path(args.data_dir))
    name = f"{args.command} {args.action}" if getattr(args, "action", None) else args.command
    remote: StackCommand = _load(COMMANDS[name])
    from quire.cli.tracing import traced_command

    return asyncio.run(traced_command(name, remote(args, config, out)))


def run() -> int:
    """The ``quire`` program: the arguments parsed (gRPC not loaded yet), the
    libraries quieted, then the command. ``quire up`` runs the services, which
    inherit its environment: their gRPC logs stay as configured."""
    args = _parse(sys.argv[1:])
    quiet_library_logs()
    if args.command != "up":
        quiet_grpc_core()
    return _entry(args)


def main(argv: list[str] | None = None) -> int:
    """Run one command (``argv``, default ``sys.argv[1:]``); its exit code."""
    return _entry(_parse(sys.argv[1:] if argv is None else argv))


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(export_by_default(argv))


def _entry(args: argparse.Namespace) -> int:
    out = Output(as_json=args.json)
    try:
        return _main(args, out)
    except BrokenPipeError:
        # The reader went away (`quire jobs --json | head`): not an error of ours.
        # Python's own advice: point stdout at nothing so the exit flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(args: argparse.Namespace, out: Output) -> int:
    from quire.cli.errors import failure_of  # loads gRPC: after ``run`` quieted it

    try:
        code = _run(args, out)
    except (Exception, KeyboardInterrupt) as error:
        failure = failure_of(error)
        if failure is None or isinstance(error, BrokenPipeError):
            raise  # a bug (keep its traceback), or a closed stdout (main's)
        print("error: " + "\n".join(failure.lines()), file=sys.stderr, flush=True)
        out.emit(failure.document())
        return int(failure.code)
    out.emit()
    return int(code)


if __name__ == "__main__":
    sys.exit(run())
