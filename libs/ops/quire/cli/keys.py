"""Operators: the tenants' data keys and the KEKs that wrap them
(``quire keys rotate``, the signing key, is ``quire.cli.signingkeys``).

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
import os
from pathlib import Path

from quire.cli.errors import CliError
from quire.cli.output import Output
from quire.datakeys import DataKeys
from quire.kek import new_ring_line
from quire.privatefiles import write_private
from quire.settings import ServiceSettings
from quire.storage import keeper_env, open_blob_store, tool_kek_settings

__all__ = ["run"]


def _data_keys(data_dir: Path) -> DataKeys:
    env = keeper_env(data_dir, {**os.environ, "QUIRE_DATA_DIR": str(data_dir)})
    settings = ServiceSettings.from_env("audit", env)
    # The configured blob backend's key ring (files, or the NATS bucket).
    return open_blob_store(settings, kek=tool_kek_settings(settings.data_dir, env)).keys


def run(args: argparse.Namespace, out: Output) -> int:
    if args.action == "new-kek":
        return _new_kek(Path(args.ring), args.id, out)
    keys = _data_keys(Path(args.data_dir).resolve())
    if args.action == "status":
        status = keys.status()
        for line in status_lines(status):
            out.line(line)
        out.result({"status": status})
        return 0
    if args.action == "rewrap":
        report = keys.rewrap()
        out.line(
            f"rewrapped {report.rewrapped} data keys under {report.current_kek}; "
            f"{report.already_current} already were"
        )
        out.result(
            {
                "rewrapped": report.rewrapped,
                "current_kek": report.current_kek,
                "already_current": report.already_current,
            }
        )
        return 0
    if not args.yes:
        raise CliError("shredding cannot be undone: add --yes")
    tenant = args.tenant.removeprefix("tenants/")
    destroyed = keys.shred(tenant)
    out.line(f"destroyed {destroyed} data keys of tenants/{tenant}; its blobs are unreadable")
    out.result({"tenant": f"tenants/{tenant}", "destroyed": destroyed})
    return 0


def status_lines(status: list[dict[str, object]]) -> list[str]:
    """``tenants/ID  3 data keys`` (or ``shredded``), then a line per key:
    ``  v2  wrapped by kek-… at …``."""
    if not status:
        return ["no data keys"]
    lines = []
    for tenant in status:
        keys = tenant["keys"]
        assert isinstance(keys, list)
        state = "shredded" if tenant["shredded"] else f"{len(keys)} data keys"
        lines.append(f"tenants/{tenant['tenant']}  {state}")
        lines += [f"  v{k['version']}  wrapped by {k['kek']} at {k['wrapped_at']}" for k in keys]
    return lines


def _new_kek(ring: Path, kek_id: str, out: Output) -> int:
    old = ring.read_text() if ring.exists() else ""
    line = new_ring_line(kek_id or None)
    write_private(ring, (line + old).encode())
    kek = line.split()[0]
    out.line(f"{kek} now wraps; the ring keeps {len(old.splitlines())} older lines")
    out.result({"kek": kek, "older_lines": len(old.splitlines()), "ring": str(ring)})
    return 0
