"""``quire workers``: the processes that announced themselves
(``quire.announcements``), grouped by service and deployable version.

It reads the ``quire_workers`` bucket with an operator's NATS login: the
embedded stack's (its URL from ``stack.json``, its password under the data
directory) unless ``--nats-url``, ``--user`` and ``--password-file`` (or
``QUIRE_NATS_URL`` and ``QUIRE_NATS_PASSWORD_FILE``) say otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.js.errors import BucketNotFoundError

from quire.announcements import WORKERS_BUCKET, Announcement, read_announcements
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.natsreach import reach_nats
from quire.cli.output import Output
from quire.natsauth import OPERATOR

__all__ = ["run", "groups"]

STACK_FILE = "stack.json"  # as quire.stack.supervisor writes it (not imported: it is heavy)


@dataclass
class Group:
    """The processes of one service that run one version, track and rulesets."""

    service: str
    build_version: str
    track: str
    rulesets: list[str]
    instances: list[Announcement] = field(default_factory=list)

    def newest_heartbeat_age(self, now: datetime) -> float | None:
        ages = [_age(entry, now) for entry in self.instances]
        known = [age for age in ages if age is not None]
        return min(known) if known else None

    def document(self, now: datetime) -> dict[str, Any]:
        return {
            "service": self.service,
            "build_version": self.build_version,
            "track": self.track,
            "rulesets": self.rulesets,
            "instances": [
                {
                    "instance": entry.instance,
                    "started_at": entry.started_at,
                    "heartbeat_at": entry.heartbeat_at,
                    "heartbeat_age_seconds": _age(entry, now),
                }
                for entry in self.instances
            ],
            "heartbeat_age_seconds": self.newest_heartbeat_age(now),
        }


def _age(entry: Announcement, now: datetime) -> float | None:
    beat = entry.heartbeat_time()
    return None if beat is None else round(max(0.0, (now - beat).total_seconds()), 1)


def groups(entries: list[Announcement]) -> list[Group]:
    """By service, version, track and rulesets, in that order."""
    found: dict[tuple[str, str, str, tuple[str, ...]], Group] = {}
    for entry in entries:
        rulesets = sorted(entry.rulesets)
        key = (entry.service, entry.build_version, entry.track, tuple(rulesets))
        group = found.setdefault(
            key, Group(entry.service, entry.build_version, entry.track, rulesets)
        )
        group.instances.append(entry)
    for group in found.values():
        group.instances.sort(key=lambda entry: entry.instance)
    return [found[key] for key in sorted(found)]


def _nats_url(args: argparse.Namespace, data_dir: Path) -> str:
    if args.nats_url:
        return str(args.nats_url)
    try:
        return str(json.loads((data_dir / STACK_FILE).read_text())["nats_url"])
    except (OSError, ValueError, KeyError):
        raise CliError(
            f"no NATS server: no stack.json in {data_dir}; give --nats-url or set QUIRE_NATS_URL",
            ExitCode.UNREACHABLE,
        ) from None


def _password(args: argparse.Namespace, data_dir: Path, user: str) -> str:
    if args.password_file:
        path = Path(args.password_file)
    else:  # the embedded stack's login (quire.stack.supervisor's credentials directory)
        path = data_dir / "credentials" / "nats" / f"{user}.password"
        if not path.exists():
            return ""  # a NATS without authorization
    try:
        return path.read_text().strip()
    except OSError:
        raise CliError(f"cannot read the NATS password in {path}") from None


async def _read(url: str, user: str, password: str) -> list[Announcement]:
    nc = await reach_nats(url, "quire-workers", user=user if password else "", password=password)
    try:
        return await read_announcements(nc.jetstream(timeout=10))
    except BucketNotFoundError:
        raise CliError(
            f"no {WORKERS_BUCKET} bucket: provision the topology (`quire nats provision`)"
        ) from None
    finally:
        await nc.close()


def _heartbeat(age: float | None) -> str:
    return "?" if age is None else f"{age:.0f}s ago"


def run(args: argparse.Namespace, out: Output) -> int:
    data_dir = Path(args.data_dir)
    user = args.user or OPERATOR
    entries = asyncio.run(_read(_nats_url(args, data_dir), user, _password(args, data_dir, user)))
    now = datetime.now(UTC)
    found = groups(entries)
    header = ("SERVICE", "VERSION", "INSTANCES", "TRACK", "RULESETS", "LAST HEARTBEAT")
    rows = [
        (
            group.service,
            group.build_version,
            str(len(group.instances)),
            group.track,
            ",".join(group.rulesets) or "-",
            _heartbeat(group.newest_heartbeat_age(now)),
        )
        for group in found
    ]
    if rows:
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            out.line(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
    else:
        out.line("no workers announced")
    out.result({"workers": [group.document(now) for group in found]})
    return int(ExitCode.OK)
