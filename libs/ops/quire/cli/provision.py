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

from quire.identity import provision_identities
from quire.natsauth import OPERATOR, authorization_config, provision_nats_passwords
from quire.runtime import connect_nats
from quire.settings import SERVICES, QueueSettings
from quire.workqueue.topology import ensure_topology

__all__ = ["add_arguments", "run"]


def add_arguments(credentials: argparse.ArgumentParser, nats: argparse.ArgumentParser) -> None:
    actions = credentials.add_subparsers(dest="action", required=True)
    actions.add_parser("init", help="generate what is missing").add_argument("directory")
    provision = nats.add_subparsers(dest="action", required=True).add_parser("provision")
    provision.add_argument("--nats-url", default=os.environ.get("QUIRE_NATS_URL", ""))
    provision.add_argument("--user", default=OPERATOR)
    provision.add_argument(
        "--password-file", default=os.environ.get("QUIRE_NATS_PASSWORD_FILE", "")
    )


def run(args: argparse.Namespace) -> int:
    if args.command == "credentials":
        return _init(Path(args.directory))
    return asyncio.run(_provision(args))


def _init(directory: Path) -> int:
    made = provision_identities(directory / "identity", SERVICES)
    passwords = provision_nats_passwords(directory / "nats", (*SERVICES, OPERATOR))
    config = directory / "nats" / "authorization.conf"
    config.write_text(authorization_config(passwords) + "\n")
    print(f"identity keys made for: {', '.join(made) or 'none (all existed)'}")
    print(f"NATS authorization block (bcrypt hashes only): {config}")
    print("Create one Secret per service from identity/<service>.key and nats/<service>.password,")
    print("a ConfigMap from identity/*.pub, and keep nats/operator.password for operators only.")
    return 0


async def _provision(args: argparse.Namespace) -> int:
    password = Path(args.password_file).read_text().strip() if args.password_file else ""
    nc = await connect_nats(args.nats_url, "quire-provision", user=args.user, password=password)
    try:
        await ensure_topology(nc.jetstream(timeout=10), QueueSettings.from_env(os.environ))
    finally:
        await nc.close()
    print("streams, consumers and the job-gate bucket are in place")
    return 0
