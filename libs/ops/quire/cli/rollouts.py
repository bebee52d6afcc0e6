"""``quire rollout start|status|promote|rollback``: an operator opens a
canary of one stage's candidate (a worker version, a ruleset version, or
both), watches it, and promotes or rolls it back.

Admission pins each new job to a track from the job id alone
(``quire.tracks``); the track is on every ledger entry and in the job's
status. Not built yet: routing the candidate track to the candidate's
workers (so today every worker still takes every track), and in ``status``
the comparison of candidate and baseline (latency, rejections, retries,
dead letters, shadow decisions) and counts of jobs by track: audit has no
job listing to count them from yet.
"""

from __future__ import annotations

import argparse
from typing import Any

from quire.admission.v1 import rollout_pb2
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.output import Output, message_dict
from quire.client import TenantAdminClient

__all__ = ["rollout_promote", "rollout_rollback", "rollout_start", "rollout_status"]


def _client(config: ClientConfig) -> TenantAdminClient:
    if not config.operator_token:
        raise CliError("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    return TenantAdminClient(config.admission, config.operator_token, tls=config.tls)


def rollout_resource(rollout: str) -> str:
    """``rollouts/{id}`` whether the user typed the id or the resource name."""
    return rollout if rollout.startswith("rollouts/") else f"rollouts/{rollout}"


def _state(rollout: rollout_pb2.Rollout) -> str:
    return rollout_pb2.RolloutState.Name(rollout.state).removeprefix("ROLLOUT_STATE_")


def rollout_dict(rollout: rollout_pb2.Rollout) -> dict[str, Any]:
    """The rollout as JSON, its state as printed (``CANARY``), zeros kept."""
    data = message_dict(rollout)
    data["state"] = _state(rollout)
    data["share_basis_points"] = rollout.share_basis_points
    data["canary_share_basis_points"] = rollout.canary_share_basis_points
    data.setdefault("tenants", [])
    return data


def _line(rollout: rollout_pb2.Rollout, out: Output) -> None:
    candidate = [
        f"version={rollout.candidate_version}" if rollout.candidate_version else "",
        f"ruleset={rollout.candidate_ruleset}" if rollout.candidate_ruleset else "",
    ]
    tenants = ",".join(rollout.tenants) or "all tenants"
    out.line(
        f"{rollout.name}  {rollout.stage}  {_state(rollout)}  "
        f"share={rollout.share_basis_points / 100:g}%  "
        f"(opened at {rollout.canary_share_basis_points / 100:g}%)  "
        f"cap={rollout.concurrency_cap}  {' '.join(c for c in candidate if c)}  {tenants}"
    )


async def rollout_start(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        rollout = await admin.start_rollout(
            stage=args.stage,
            candidate_version=args.candidate_version,
            candidate_ruleset=args.candidate_ruleset,
            share_basis_points=args.share,
            tenants=[t if t.startswith("tenants/") else f"tenants/{t}" for t in args.tenants],
            concurrency_cap=args.cap,
            request_id=args.request_id,
        )
    _line(rollout, out)
    out.result({"rollout": rollout_dict(rollout)})
    return 0


async def rollout_status(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        if args.rollout:
            rollouts = [await admin.get_rollout(rollout_resource(args.rollout))]
        else:
            rollouts = await admin.list_rollouts()
    for rollout in rollouts:
        _line(rollout, out)
    if not rollouts:
        out.line("no rollouts")
    out.line(
        "(tracks are pinned and recorded; routing by track and the candidate/baseline"
        " comparison are not built yet)"
    )
    out.result({"rollouts": [rollout_dict(rollout) for rollout in rollouts]})
    return 0


async def rollout_promote(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        rollout = await admin.promote_rollout(
            rollout_resource(args.rollout), request_id=args.request_id
        )
    _line(rollout, out)
    out.result({"rollout": rollout_dict(rollout)})
    return 0


async def rollout_rollback(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        rollout = await admin.rollback_rollout(
            rollout_resource(args.rollout), request_id=args.request_id
        )
    _line(rollout, out)
    out.result({"rollout": rollout_dict(rollout)})
    return 0
