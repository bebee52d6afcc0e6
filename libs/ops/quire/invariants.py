"""The invariant checker behind ``quire check``: after any run, with the stack
stopped or running and idle, read every service's records read-only and
report each promise of DESIGN.md that does not hold.

It is an operations tool like fsck, that reads no service's tables: it asks
each service for the records it owns (a running stack's services over their
export API, a stopped stack's through each service's own export of its
database: ``quire.servicerecords``), verifies audit's answer against the
hashed bytes with the ledger's own rules, hashes the signed artifacts in the
configured blob store again, and holds every service's answer against the
others'. It writes nothing. What it reports is listed in
``quire.invariants_findings``.

Whether the stack is stopped decides one rule: a stopped stack must leave
``.tmp`` empty, while a running one may be using entries whose owner lives.
Pass ``stopped`` to say so; left ``None`` it is detected from the data
directory (``quire.stack.running``): the stack counts as running while its
lock is held, as stopped when it is not, and as running (the weaker rule)
when there is no ``stack.json`` (a cluster, say).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from quire.invariants_blobs import scan_artifacts, temp_findings
from quire.invariants_findings import KINDS, Finding
from quire.invariants_jobs import artifact_findings, job_findings, ledger_row_findings
from quire.invariants_provenance import packet_sizes, provenance_findings
from quire.invariants_snapshot import read_snapshot
from quire.stack.running import stack_running
from quire.storage import open_blob_store, service_settings, tool_kek_settings

__all__ = ["CheckReport", "Finding", "KINDS", "check", "stack_running"]


@dataclass(frozen=True)
class CheckReport:
    findings: list[Finding]
    stopped: bool
    """Whether the check treated the stack as stopped."""
    jobs_accepted: int
    jobs_by_state: Mapping[str, int] = field(default_factory=dict)
    """Audit's job view, by state."""
    ledger_entries: int = 0
    ledger_chains: int = 0
    checkpoints_checked: int = 0
    artifacts: int = 0
    temp_entries: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def kinds(self) -> set[str]:
        return {finding.kind for finding in self.findings}


def check(
    data_dir: Path,
    *,
    stopped: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> CheckReport:
    """Check every invariant over ``data_dir``; see the module's docstring."""
    env = os.environ if env is None else env
    data_dir = data_dir.resolve()
    if stopped is None:
        stopped = stack_running(data_dir) is False
    snapshot = read_snapshot(data_dir, env, stopped=stopped)
    settings = service_settings(data_dir, "signer", env)
    blobs = open_blob_store(settings, kek=tool_kek_settings(data_dir, env))
    try:
        scan = scan_artifacts(blobs, packet_sizes(snapshot))
    finally:
        blobs.close()
    findings = [Finding("database_missing", detail=s) for s in snapshot.missing_databases]
    findings += job_findings(snapshot, scan.artifacts)
    findings += artifact_findings(snapshot, scan.artifacts)
    findings += provenance_findings(snapshot, scan.artifacts)
    if scan.unrecognized:
        findings.append(Finding("unrecognized_blob", detail=f"{scan.unrecognized} files"))
    temp, temp_entries = temp_findings(blobs.tmp_dir, stopped=stopped)
    findings += temp
    verification = snapshot.verification
    if verification is not None:
        job_at = {entry.sequence: entry.job for entry in snapshot.ledger}
        for f in verification.findings:
            if f.kind in ("column", "undecodable"):
                continue  # the same rule as ledger_row_mismatch/_undecodable below
            if f.kind == "view":
                findings.append(Finding("job_view_mismatch", f.job, f.sequence, f.column))
            else:
                findings.append(Finding(f"ledger_{f.kind}", job_at.get(f.sequence, ""), f.sequence))
    findings += ledger_row_findings(snapshot.ledger)
    findings += [
        Finding("ledger_event_refused", r.job, detail=f"{r.kind} {r.to_state} by {r.producer}")
        for r in snapshot.refused_events
        if r.kind != "LATE"
    ]
    return CheckReport(
        findings=sorted(set(findings), key=lambda f: (f.kind, f.job, f.sequence, f.detail)),
        stopped=stopped,
        jobs_accepted=len(snapshot.accepted),
        jobs_by_state=dict(sorted(Counter(v.state for v in snapshot.views.values()).items())),
        ledger_entries=len(snapshot.ledger),
        ledger_chains=verification.chains if verification else 0,
        checkpoints_checked=verification.checkpoints_checked if verification else 0,
        artifacts=len(scan.artifacts),
        temp_entries=temp_entries,
    )
