"""The options of the operators' file-level commands (check, retention, keys,
credentials, nats), kept apart from the commands themselves so building the
parser imports none of their (heavy) dependencies: ``quire --version`` or a
typo answers at once."""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = [
    "add_check_arguments",
    "add_keys_arguments",
    "add_provision_arguments",
    "add_retention_arguments",
    "add_sources_arguments",
    "add_tenant_limits_arguments",
    "add_tenant_retention_arguments",
    "add_workers_arguments",
]

WEIGHT_HELP = "its share of batch dispatch against other tenants' batches, 1 to 100 (0: 1)"


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stopped",
        action="store_true",
        help="the stack is stopped: its temporary space must be empty "
        "(detected from stack.json when not given)",
    )


def add_keys_arguments(
    keys: argparse.ArgumentParser,
    common: argparse.ArgumentParser,
    once: argparse.ArgumentParser,
) -> None:
    actions = keys.add_subparsers(dest="action", required=True, help="what to do")
    actions.add_parser(
        "rotate",
        parents=[common, once],
        help="the signer's next signing key version signs from now on (older ones still verify)",
    )
    actions.add_parser(
        "status", parents=[common], help="each tenant's data keys: version, wrapping KEK, when"
    )
    new = actions.add_parser(
        "new-kek", parents=[common], help="put a fresh KEK first in a ring file"
    )
    new.add_argument("ring", help="the KEK ring file to put a fresh KEK first in")
    new.add_argument("--id", default="", help="the new KEK's id (default: kek-<time>)")
    actions.add_parser("rewrap", parents=[common], help="wrap every data key under the current KEK")
    shred = actions.add_parser(
        "shred", parents=[common], help="destroy a tenant's data keys (crypto-shredding)"
    )
    shred.add_argument("tenant", help="tenants/ID whose data keys to destroy")
    shred.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")


def add_provision_arguments(
    credentials: argparse.ArgumentParser,
    nats: argparse.ArgumentParser,
    common: argparse.ArgumentParser,
) -> None:
    actions = credentials.add_subparsers(dest="action", required=True, help="what to do")
    actions.add_parser("init", parents=[common], help="generate what is missing").add_argument(
        "directory", help="where to write identity/ and nats/"
    )
    provision = nats.add_subparsers(dest="action", required=True, help="what to do").add_parser(
        "provision", parents=[common], help="streams, consumers and the job-gate bucket"
    )
    provision.add_argument(
        "--nats-url",
        default=os.environ.get("QUIRE_NATS_URL", ""),
        help="the NATS server (default: QUIRE_NATS_URL)",
    )
    provision.add_argument(
        "--user", default="", help="the NATS user to log in as (default: the operator)"
    )
    provision.add_argument(
        "--password-file",
        default=os.environ.get("QUIRE_NATS_PASSWORD_FILE", ""),
        help="that user's password (default: QUIRE_NATS_PASSWORD_FILE)",
    )


def add_retention_arguments(
    retention: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> None:
    actions = retention.add_subparsers(dest="action", required=True, help="what to do")
    for name, help_text in (
        ("plan", "print what the policy retires now, and why (changes nothing)"),
        ("apply", "retire it: record each deletion in the ledger, then delete the bytes"),
    ):
        action = actions.add_parser(name, parents=[common], help=help_text)
        action.add_argument(
            "--as-of",
            default="",
            help="judge ages at this ISO 8601 time instead of now (to preview a date)",
        )


def _period(text: str) -> float:
    """A retention period: a number more than 0. Zero is refused, not read as
    "the default" (a period left out is the default; keeping nothing is
    retention's ``--as-of``, not a period)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be more than 0, got {text} (leave the option out for the default)"
        )
    return value


def add_tenant_retention_arguments(
    tenants: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    """``quire tenants retention TENANT``: sets all four periods at once; a
    period left out is the default (``QUIRE_RETENTION_*``), a period of 0 is
    refused."""
    summary = "set a tenant's retention periods (each left out: the default; 0 is refused)"
    retention = tenants.add_parser("retention", parents=[common], help=summary, description=summary)
    retention.add_argument("tenant", help="tenants/ID")
    for flag, what in (
        ("--sources-days", "keep uploaded sources this many days"),
        ("--packets-days", "keep a job's packet this many days"),
        ("--artifacts-days", "keep signed PDFs this many days"),
        ("--unused-upload-hours", "keep an upload no job used this many hours"),
    ):
        retention.add_argument(
            flag, type=_period, default=None, help=f"{what}, more than 0 (left out: the default)"
        )


def add_tenant_limits_arguments(
    tenants: argparse._SubParsersAction[Any],
    parents: list[argparse.ArgumentParser],
) -> None:
    """``quire tenants limits TENANT``: each limit given is set (0: the default),
    the others keep their values."""
    limits = tenants.add_parser("limits", parents=parents, help="set some of a tenant's limits")
    limits.add_argument("tenant", help="tenants/ID")
    for flag, what in (
        ("--max-upload-bytes", "largest upload"),
        ("--max-outstanding-jobs", "unfinished jobs"),
        ("--storage-quota-bytes", "bytes of uploads it may keep"),
    ):
        limits.add_argument(flag, type=int, default=None, help=f"{what} (0: the default)")
    limits.add_argument("--weight", type=int, default=None, help=WEIGHT_HELP)


def _seconds(text: str) -> float:
    """``5``, ``2.5`` or ``5s``: a number of seconds, not negative."""
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return value


def add_sources_arguments(
    sources: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> None:
    """``quire sources put|list|remove``: a tenant's source systems."""
    actions = sources.add_subparsers(dest="action", required=True, help="what to do")
    put = actions.add_parser(
        "put", parents=[common], help="register a source system, or replace its registration"
    )
    put.add_argument("tenant", help="tenants/ID (or the bare ID)")
    put.add_argument("system", help="the system's id: 1-63 of a-z 0-9 -, starting with a letter")
    put.add_argument(
        "--url",
        required=True,
        help="its base URL, http or https, no query or fragment; a key is appended after /",
    )
    put.add_argument(
        "--credential",
        default="",
        help="where the fetching service finds the bearer credential: env:NAME or"
        " file:/absolute/path (never the credential itself; default: none)",
    )
    put.add_argument(
        "--timeout",
        type=_seconds,
        default=0.0,
        help="one call's longest wait in seconds, e.g. 5 or 2.5s (0: the default, 5s; at most 60)",
    )
    put.add_argument(
        "--max-bytes",
        type=int,
        default=0,
        help="the most bytes one fetch may bring (0: the default, 16 MiB; at most 256 MiB)",
    )
    put.add_argument(
        "--schema",
        default="",
        help="the structure its JSON sources must have, name@version (e.g. tax-record@1)",
    )
    actions.add_parser(
        "list", parents=[common], help="a tenant's source systems, by name"
    ).add_argument("tenant", help="tenants/ID (or the bare ID)")
    remove = actions.add_parser(
        "remove", parents=[common], help="forget a source system (accepted jobs keep their copy)"
    )
    remove.add_argument("tenant", help="tenants/ID (or the bare ID)")
    remove.add_argument("system", help="the system's id")


def add_workers_arguments(workers: argparse.ArgumentParser) -> None:
    """``quire workers``: the announced processes, read with an operator's NATS login."""
    workers.add_argument(
        "--nats-url",
        default=os.environ.get("QUIRE_NATS_URL", ""),
        help="the NATS server (default: QUIRE_NATS_URL, else the stack's in stack.json)",
    )
    workers.add_argument(
        "--user", default="", help="the NATS user to log in as (default: the operator)"
    )
    workers.add_argument(
        "--password-file",
        default=os.environ.get("QUIRE_NATS_PASSWORD_FILE", ""),
        help="that user's password (default: QUIRE_NATS_PASSWORD_FILE, else the embedded "
        "stack's operator password under the data directory)",
    )
