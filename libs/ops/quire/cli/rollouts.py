"""``quire rollout start|status|promote|rollback``: an operator opens a
canary of one stage's candidate (a worker version, a ruleset version, or
both), watches it, and promotes or rolls it back.

Admission pins each new job to a track from the job id alone
(``quire.tracks``); the track is on every ledger entry and in the job's
status. ``status`` compares the candidate and the baseline over the
rollout's window (its start to its close, or now while it is open) from the
ledger (audit's ``CompareTracks``): jobs, endings, latency percentiles,
retry rate, dead letters, rejection reasons and the stage's worker
versions. ``status --shadow N`` also runs the candidate ruleset over up to N
of the baseline's completed jobs (the validator's ``EvaluateManifest``,
which records nothing) and compares the decisions with the ones recorded:
rule names and outcomes only, never document text. The queues route the
candidate track to the candidate's workers (``quire.workqueue.routing``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc

from quire.admission.v1 import rollout_pb2
from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.output import Output, message_dict
from quire.client import RolloutReadsClient, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.pipeline import TERMINAL, State
from quire.validator.v1 import validator_service_pb2 as validator_pb

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
        current = await admin.list_current_rulesets()
    for rollout in rollouts:
        _line(rollout, out)
    if not rollouts:
        out.line("no rollouts")
    # What a job naming no ruleset version gets: only a promotion changes it.
    out.line("current rulesets: " + (", ".join(r.version for r in current) or "none yet"))
    # The named rollout, or every open one: each compared over its window.
    compared = [r for r in rollouts if args.rollout or r.state == rollout_pb2.ROLLOUT_STATE_CANARY]
    comparisons = []
    if compared:
        async with RolloutReadsClient(
            audit=config.audit,
            validator=config.validator,
            operator_token=config.operator_token,
            tls=config.tls,
        ) as reads:
            for rollout in compared:
                comparisons.append(await _compare(reads, rollout, args.shadow, out))
    out.result(
        {
            "rollouts": [rollout_dict(rollout) for rollout in rollouts],
            "comparisons": comparisons,
            "current_rulesets": [message_dict(ruleset) for ruleset in current],
        }
    )
    return 0


# -- the comparison (audit's CompareTracks) and shadow evaluation ------------

SIDES = ("candidate", "baseline")
ENDINGS = tuple(state.value for state in State if state in TERMINAL)
"""COMPLETED first, then the other endings, in ``State``'s order."""
TOP_REASONS = 3
SHADOW_CONCURRENCY = 4


def _window(rollout: rollout_pb2.Rollout) -> tuple[datetime, datetime | None]:
    """From the rollout's start to its close (promoted or rolled back), or to now."""
    start = rollout.create_time.ToDatetime(tzinfo=UTC)
    if rollout.state == rollout_pb2.ROLLOUT_STATE_CANARY:
        return start, None
    return start, rollout.update_time.ToDatetime(tzinfo=UTC)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else "now"


def track_dict(summary: audit_pb.TrackSummary) -> dict[str, Any]:
    """One track's side of the comparison, as ``--json`` prints it."""
    reasons = Counter(dict(summary.reasons))
    return {
        "jobs": summary.jobs,
        **{ending.lower(): summary.endings.get(ending, 0) for ending in ENDINGS},
        "latency_seconds": {
            "p50": summary.latency_p50_seconds,
            "p95": summary.latency_p95_seconds,
            "p99": summary.latency_p99_seconds,
        },
        "steps": summary.steps,
        "retried_steps": summary.retried_steps,
        "retry_rate": summary.retried_steps / summary.steps if summary.steps else 0.0,
        "dead_letters": summary.dead_letters,
        "reasons": dict(reasons),
        "top_reasons": [[code, count] for code, count in reasons.most_common(TOP_REASONS)],
        "versions": dict(sorted(summary.versions.items())),
    }


def _table(sides: dict[str, dict[str, Any]], stage: str, out: Output) -> None:
    rows: list[tuple[str, ...]] = [("", *SIDES)]

    def row(label: str, value: Any) -> None:
        rows.append((label, *(value(sides[side]) for side in SIDES)))

    row("jobs", lambda t: str(t["jobs"]))
    for ending in (e.lower() for e in ENDINGS):
        row(ending, lambda t, e=ending: str(t[e]))
    for p in ("p50", "p95", "p99"):
        row(f"latency {p} (s)", lambda t, p=p: f"{t['latency_seconds'][p]:.2f}")
    row(
        "retry rate",
        lambda t: f"{t['retry_rate'] * 100:.1f}% ({t['retried_steps']}/{t['steps']})",
    )
    row("dead letters", lambda t: str(t["dead_letters"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for cells in rows:
        out.line(
            "  "
            + cells[0].ljust(widths[0])
            + "".join("  " + c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        )
    for title, key in (
        ("top rejection/failure reasons", "top_reasons"),
        (f"versions ({stage})", "versions"),
    ):
        out.line(f"  {title}:")
        for side in SIDES:
            value = sides[side][key]
            pairs = value if isinstance(value, list) else sorted(value.items())
            listed = ", ".join(f"{name}={count}" for name, count in pairs) or "-"
            out.line(f"    {side}: {listed}")


async def _compare(
    reads: RolloutReadsClient, rollout: rollout_pb2.Rollout, shadow: int, out: Output
) -> dict[str, Any]:
    start, end = _window(rollout)
    want_shadow = shadow > 0 and bool(rollout.candidate_ruleset)
    summaries = await reads.compare_tracks(
        start=start, end=end, stage=rollout.stage, sample_size=shadow if want_shadow else 0
    )
    by_track = {summary.track: summary for summary in summaries}
    empty = audit_pb.TrackSummary()
    sides = {side: track_dict(by_track.get(side, empty)) for side in SIDES}
    out.line(f"{rollout.name}: candidate vs baseline, {_when(start)} to {_when(end)}")
    _table(sides, rollout.stage, out)
    untracked = by_track[""].jobs if "" in by_track else 0
    if untracked:
        out.line(f"  ({untracked} job(s) of the window were accepted with no track)")
    document: dict[str, Any] = {
        "rollout": rollout.name,
        "stage": rollout.stage,
        "window": {"start": _when(start), "end": _when(end)},
        "tracks": sides,
        "untracked_jobs": untracked,
    }
    if shadow > 0 and not rollout.candidate_ruleset:
        out.line("  shadow evaluation: the rollout has no candidate ruleset")
    if want_shadow:
        sample = list(by_track.get("baseline", empty).completed_sample)[:shadow]
        report = await _shadow(reads, rollout.candidate_ruleset, sample)
        report.print(rollout.candidate_ruleset, out)
        document["shadow"] = report.document(rollout.candidate_ruleset)
    return document


@dataclass
class ShadowReport:
    """Recorded decisions against the candidate ruleset's, per job."""

    same: list[str] = field(default_factory=list)
    different: list[dict[str, Any]] = field(default_factory=list)
    not_evaluated: dict[str, str] = field(default_factory=dict)
    """Job → the reason code it could not be evaluated for (its bytes retired, ...)."""

    def document(self, ruleset: str) -> dict[str, Any]:
        return {
            "ruleset": ruleset,
            "evaluated": len(self.same) + len(self.different),
            "same": len(self.same),
            "different": len(self.different),
            "differences": self.different,
            "not_evaluated": self.not_evaluated,
        }

    def print(self, ruleset: str, out: Output) -> None:
        evaluated = len(self.same) + len(self.different)
        out.line(
            f"  shadow evaluation of {ruleset} on {evaluated} baseline completed job(s): "
            f"same={len(self.same)} different={len(self.different)}"
            + (f" not_evaluated={len(self.not_evaluated)}" if self.not_evaluated else "")
        )
        for diff in self.different:
            rules = ", ".join(
                f"{_rule_name(r)} {r['recorded'] or 'none'}->{r['candidate'] or 'none'}"
                for r in diff["rules"]
            )
            out.line(
                f"    {diff['job']}  {diff['recorded']['verdict']} -> "
                f"{diff['candidate']['verdict']}"
                + (
                    f" ({diff['candidate']['reason_code']})"
                    if diff["candidate"]["reason_code"]
                    else ""
                )
                + (f"  rules: {rules}" if rules else "")
            )
        for job, reason in self.not_evaluated.items():
            out.line(f"    {job}  not evaluated ({reason})")


def _rule_name(rule: dict[str, Any]) -> str:
    """A rule's id, and the document it judged when it judged one."""
    return str(rule["rule"]) if rule["position"] < 0 else f"{rule['rule']}[{rule['position']}]"


def _outcomes(decisions: Sequence[validator_pb.RuleDecision]) -> dict[tuple[str, int], str]:
    """Each rule's outcome per document position (names and outcomes only)."""
    return {(d.rule, d.position): d.outcome for d in decisions}


def shadow_difference(
    job: str, recorded: validator_pb.Validation, candidate: validator_pb.Evaluation
) -> dict[str, Any] | None:
    """How the candidate's decision differs from the recorded one; None when
    the verdict, its reason and every rule's outcome are the same."""
    before, after = _outcomes(recorded.decisions), _outcomes(candidate.decisions)
    rules = [
        {
            "rule": rule,
            "position": position,
            "recorded": before.get((rule, position), ""),
            "candidate": after.get((rule, position), ""),
        }
        for rule, position in sorted(before.keys() | after.keys())
        if before.get((rule, position)) != after.get((rule, position))
    ]
    same_verdict = (recorded.verdict, recorded.reason_code) == (
        candidate.verdict,
        candidate.reason_code,
    )
    if same_verdict and not rules:
        return None
    return {
        "job": job,
        "recorded": {
            "ruleset": recorded.ruleset_version,
            "verdict": recorded.verdict,
            "reason_code": recorded.reason_code,
        },
        "candidate": {
            "ruleset": candidate.ruleset_version,
            "verdict": candidate.verdict,
            "reason_code": candidate.reason_code,
        },
        "rules": rules,
    }


async def _shadow(reads: RolloutReadsClient, ruleset: str, jobs: list[str]) -> ShadowReport:
    report = ShadowReport()
    gate = asyncio.Semaphore(SHADOW_CONCURRENCY)

    async def one(job: str) -> tuple[str, Any]:
        async with gate:
            try:
                recorded = await reads.get_validation(job)
                candidate = await reads.evaluate_manifest(job, ruleset=ruleset)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                    raise
                return job, reason_of(error) or error.code().name
            return job, shadow_difference(job, recorded, candidate)

    for job, outcome in await asyncio.gather(*(one(job) for job in jobs)):
        if isinstance(outcome, str):
            report.not_evaluated[job] = outcome
        elif outcome is None:
            report.same.append(job)
        else:
            report.different.append(outcome)
    return report


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
