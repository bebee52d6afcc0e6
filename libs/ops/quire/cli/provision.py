"""Operators: credentials and queue topology for a deployment outside the
embedded stack (which does both itself at first start).

    quire credentials init DIR     identity key pairs, NATS passwords and the
                                   nats-server authorization block, into DIR
    quire nats provision           streams, consumers and the job-gate bucket,
                                   with the operator's NATS login
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from quire.cli.errors import CliError
from quire.cli.natsreach import reach_nats
from quire.cli.output import Output
from quire.identity import provision_identities
from quire.natsauth import KEEPER, OPERATOR, authorization_config, provision_nats_passwords
from quire.settings import SERVICES, QueueSettings
from quire.workqueue.topology import ensure_topology

__all__ = ["run"]


def run(args: argparse.Namespace, out: Output) -> int:
    if args.command == "credentials":
        return _init(Path(args.directory), out)
    return asyncio.run(_provision(args, out))


def _init(directory: Path, out: Output) -> int:
    made = provision_identities(directory / "identity", SERVICES)
    passwords = provision_nats_passwords(directory / "nats", (*SERVICES, KEEPER, OPERATOR))
    config = directory / "nats" / "authorization.conf"
    config.write_text(authorization_config(passwords) + "\n")
    out.line(f"identity keys made for: {', '.join(made) or 'none (all existed)'}")
    out.line(f"NATS authorization block (bcrypt hashes only): {config}")
    out.line(
        "Create one Secret per service from identity/<service>.key and nats/<service>.password,"
    )
    out.line(
        "a ConfigMap from identity/*.pub; keep nats/operator.password and"
        " nats/keeper.password (retention, shredding, KEK rotation) for operators only."
    )
    out.result({"identities_made": list(made), "authorization": str(config)})
    return 0


async def _provision(args: argparse.Namespace, out: Output) -> int:
    if not args.nats_url:
        raise CliError("no NATS server: give --nats-url or set QUIRE_NATS_URL")
    password = Path(args.password_file).read_text().strip() if args.password_file else ""
    nc = await reach_nats(
        args.nats_url, "quire-provision", user=args.user or OPERATOR, password=password
    )
    try:
        await ensure_topology(nc.jetstream(timeout=10), QueueSettings.from_env(os.environ))
    finally:
        await nc.close()
    out.line("streams, consumers and the job-gate bucket are in place")
    out.result({"provisioned": ["streams", "consumers", "job-gate bucket"]})
    return 0
