"""Operators: the tenants' data keys and the KEKs that wrap them.

    quire keys status              each tenant's data keys: version, wrapping KEK, shredded
    quire keys new-kek RING        put a fresh KEK first in a ring file (0600): it
                                   wraps from the next start or rewrap on
    quire keys rewrap              wrap every data key under the current KEK; blobs
                                   are not touched
    quire keys shred TENANT --yes  destroy the tenant's data keys (crypto-shredding)

KEK rotation, with no downtime: ``new-kek`` on the ring the services mount,
roll the services out (the old KEK still unwraps), ``rewrap``, then delete the
old KEK's line and roll out again. The KEKs come from the environment as the
services read it (``QUIRE_KEK_FILE`` / ``QUIRE_KEK_PKCS11_*``), or, for an
embedded stack, its development ring. Nothing here prints key material.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from quire.datakeys import DataKeys
from quire.errors import QuireError
from quire.kek import KekConfigError, new_ring_line
from quire.privatefiles import write_private
from quire.settings import ServiceSettings
from quire.storage import open_blob_store, tool_kek_settings

__all__ = ["add_arguments", "run"]


def add_arguments(keys: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = keys.add_subparsers(dest="action", required=True)
    actions.add_parser("status", parents=[common])
    new = actions.add_parser("new-kek", parents=[common])
    new.add_argument("ring", help="the KEK ring file to put a fresh KEK first in")
    new.add_argument("--id", default="", help="the new KEK's id (default: kek-<time>)")
    actions.add_parser("rewrap", parents=[common])
    shred = actions.add_parser("shred", parents=[common])
    shred.add_argument("tenant")
    shred.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")


def _data_keys(data_dir: Path) -> DataKeys:
    env = {**os.environ, "QUIRE_DATA_DIR": str(data_dir)}
    settings = ServiceSettings.from_env("audit", env)
    # The configured blob backend's key ring (files, or the NATS bucket).
    return open_blob_store(settings, kek=tool_kek_settings(settings.data_dir, env)).keys


def run(args: argparse.Namespace) -> int:
    if args.action == "new-kek":
        return _new_kek(Path(args.ring), args.id)
    try:
        keys = _data_keys(Path(args.data_dir).resolve())
    except KekConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.action == "status":
        print(json.dumps(keys.status(), indent=2))
        return 0
    if args.action == "rewrap":
        report = keys.rewrap()
        print(
            f"rewrapped {report.rewrapped} data keys under {report.current_kek}; "
            f"{report.already_current} already were"
        )
        return 0
    if not args.yes:
        print("shredding cannot be undone: add --yes", file=sys.stderr)
        return 2
    tenant = args.tenant.removeprefix("tenants/")
    try:
        destroyed = keys.shred(tenant)
    except QuireError as error:
        print(f"error: {error.reason.value}", file=sys.stderr)
        return 2
    print(f"destroyed {destroyed} data keys of tenants/{tenant}; its blobs are unreadable")
    return 0


def _new_kek(ring: Path, kek_id: str) -> int:
    old = ring.read_text() if ring.exists() else ""
    line = new_ring_line(kek_id or None)
    write_private(ring, (line + old).encode())
    print(f"{line.split()[0]} now wraps; the ring keeps {len(old.splitlines())} older lines")
    return 0
