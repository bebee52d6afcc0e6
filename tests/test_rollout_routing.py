"""Routing by track on the real stack (issue 20): two builds of the
validator and two ruleset versions.

The stack's validator is the baseline (build 0.1.0, ruleset default@1). A
second validator process is the candidate: build 0.2.0, shipping default@2
beside the shipped rulesets. A validate rollout of 0.2.0 with default@2 sends
a share of new jobs to the candidate's queue, whose cap holds it:

- every candidate-track job is validated by 0.2.0 under default@2, every
  baseline job by 0.1.0 under default@1 (the queues route; no worker skips);
- the candidate never holds more jobs at once than the rollout's cap.

Then the rollback, in the middle of the canary: a candidate build that dies
(SIGKILL) before committing each step it takes holds leases when the
rollout is rolled back. Every job still ends exactly once, COMPLETED; the
dead candidate's jobs are finished by the baseline (0.1.0, under the job's
own ruleset: the rolled-back candidate's is not run); no ledger entry
is removed; ``quire check``'s invariants hold.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from collections import Counter
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path

import pytest
from test_faults_common import most_at_once, running_stack, submit_tracked_jobs, wait_all

from quire.client import TenantAdminClient
from quire.jobs import state_name
from quire.stack.supervisor import Stack
from quire.testing.quirecli import run_quire
from quire.testing.replicas import candidate_consumer, extra_process, wait_serving
from quire.tracks import BASELINE, CANDIDATE
from quire.type import queue_pb2

pytestmark = pytest.mark.stack

SHIPPED = Path(__file__).resolve().parent.parent / (
    "services/validator/quire/validator/shipped_rulesets"
)
BASELINE_BUILD = "0.1.0"
CANDIDATE_BUILD = "0.2.0"
CAP = 2
SHARE = 3000
"""30 %: enough candidate jobs among few to see the cap held."""
JOBS = 40
ROLLBACK_JOBS = 20
ENV = {
    "QUIRE_QUEUE_AGE_BUDGET_SECONDS": "3600",
    # A dead candidate's deliveries come back soon.
    "QUIRE_ACK_WAIT_SECONDS": "4",
    "QUIRE_VALIDATOR_CONCURRENCY": "4",
}


def _rulesets(directory: Path) -> Path:
    """The shipped rulesets and default@2 (a new version of default)."""
    directory.mkdir(parents=True)
    for path in SHIPPED.glob("*.json"):
        (directory / path.name).write_text(path.read_text())
    body = json.loads((SHIPPED / "default-1.json").read_text())
    body.update(version="2", description=body["description"] + " (version 2)")
    (directory / "default-2.json").write_text(json.dumps(body))
    return directory


def _candidate_validator(
    stack: Stack, rulesets: Path, name: str, faults: str = ""
) -> AbstractAsyncContextManager[subprocess.Popen[bytes]]:
    env = {"QUIRE_BUILD_VERSION": CANDIDATE_BUILD, "QUIRE_RULESETS_DIR": str(rulesets)}
    if faults:
        env["QUIRE_FAULTS"] = faults
    return extra_process(stack, "validator", name, env)


def _events(data_dir: Path) -> list[tuple[int, str, queue_pb2.TransitionEvent]]:
    path = data_dir / "audit" / "audit.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT sequence, entry_hash, event FROM ledger ORDER BY sequence")
        return [(seq, h, queue_pb2.TransitionEvent.FromString(e)) for seq, h, e in rows]


def _validations(data_dir: Path) -> dict[str, queue_pb2.TransitionEvent]:
    """Each job's validator hand-on (to ASSEMBLING): who validated, under what."""
    return {
        event.job: event
        for _, _, event in _events(data_dir)
        if event.actor.service == "validator" and state_name(event.to_state) == "ASSEMBLING"
    }


def _held(data_dir: Path, jobs: set[str]) -> list[tuple[datetime, datetime]]:
    path = data_dir / "validator" / "validator.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT job, leased_at, updated_at FROM stage_leases WHERE outcome IS NOT NULL"
        ).fetchall()
    return [
        (datetime.fromisoformat(a), datetime.fromisoformat(b))
        for job, a, b in rows
        if f"jobs/{job.removeprefix('jobs/')}" in jobs and a
    ]


async def test_two_validator_builds_split_by_track_and_a_rollback_hands_work_to_the_baseline(
    tmp_path: Path,
) -> None:
    rulesets = _rulesets(tmp_path / "rulesets")
    async with running_stack(tmp_path / "stack", ENV) as running:
        stack = running.stack
        token = running.info.operator_token()
        async with TenantAdminClient(running.info.endpoints["admission"], token) as admin:
            async with _candidate_validator(stack, rulesets, "validator-candidate"):
                rollout = await admin.start_rollout(
                    stage="validate",
                    candidate_version=CANDIDATE_BUILD,
                    candidate_ruleset="default@2",
                    share_basis_points=SHARE,
                    concurrency_cap=CAP,
                )
                assert (await candidate_consumer(stack, "validate"))[
                    0
                ] == CAP  # set before it is used
                await wait_serving(stack, "validator-candidate", CANDIDATE)
                tracks = await submit_tracked_jobs(
                    running.client, tmp_path / "canary", JOBS, ruleset="default@1"
                )
                jobs = await wait_all(running.client, list(tracks), timeout=180)
                assert {state_name(j.state) for j in jobs.values()} == {"COMPLETED"}

                candidates = {job for job, track in tracks.items() if track == CANDIDATE}
                assert candidates and set(tracks.values()) == {CANDIDATE, BASELINE}
                made = _validations(stack.data_dir)
                by_track = Counter(
                    (tracks[job], made[job].actor.build_version, made[job].ruleset_version)
                    for job in tracks
                )
                assert by_track == {
                    (CANDIDATE, CANDIDATE_BUILD, "default@2"): len(candidates),
                    (BASELINE, BASELINE_BUILD, "default@1"): JOBS - len(candidates),
                }, by_track
                peak = most_at_once(_held(stack.data_dir, candidates))
                print(f"candidate jobs {len(candidates)}/{JOBS}, peak held {peak}")  # noqa: T201
                assert 1 <= peak <= CAP, f"the candidate held {peak} jobs at once; cap {CAP}"

                status = run_quire(
                    stack.data_dir, "rollout", "status", rollout.name, "--shadow", "5", "--json"
                )
                assert status.returncode == 0, status.stderr
                shown = json.loads(status.stdout)
                sides = shown["comparisons"][0]["tracks"]
                assert sides["candidate"]["completed"] == len(candidates)
                assert sides["baseline"]["completed"] == JOBS - len(candidates)
                assert set(sides["candidate"]["versions"]) == {f"validator@{CANDIDATE_BUILD}"}
                assert set(sides["baseline"]["versions"]) == {f"validator@{BASELINE_BUILD}"}
                # default@2 decides as default@1 did: no decision differs.
                shadow = shown["comparisons"][0]["shadow"]
                assert (shadow["evaluated"], shadow["different"]) == (5, 0), shadow
                printed = run_quire(stack.data_dir, "rollout", "status", rollout.name)
                assert "candidate vs baseline" in printed.stdout, printed.stdout

            # The middle of the canary: a candidate that dies holding leases.
            async with _candidate_validator(
                stack, rulesets, "validator-doomed", faults="validator.before_commit:always"
            ) as doomed:
                await wait_serving(stack, "validator-doomed", CANDIDATE)
                before = _events(stack.data_dir)
                more = await submit_tracked_jobs(
                    running.client, tmp_path / "rollback", ROLLBACK_JOBS, ruleset="default@1"
                )
                doomed_jobs = {job for job, track in more.items() if track == CANDIDATE}
                assert doomed_jobs, "some of the jobs are the candidate's"
                # It takes a candidate job, does the work, and dies before committing.
                await asyncio.to_thread(doomed.wait, 60)
                assert doomed.returncode == -9, doomed.returncode
                _, unsettled = await candidate_consumer(stack, "validate")
                assert unsettled >= 1, "the dead candidate's deliveries are still leased"
                back = await admin.rollback_rollout(rollout.name)
                assert back.share_basis_points == 0

            jobs = await wait_all(running.client, list(more), timeout=180)
            assert {state_name(j.state) for j in jobs.values()} == {"COMPLETED"}
            after = _events(stack.data_dir)
            # No entry removed or changed: the earlier ledger is a prefix.
            assert after[: len(before)] == before
            ends = Counter(
                event.job
                for _, _, event in after
                if event.job in more and state_name(event.to_state) == "COMPLETED"
            )
            assert ends == dict.fromkeys(more, 1), ends  # exactly once each
            made = _validations(stack.data_dir)
            assert {made[job].actor.build_version for job in doomed_jobs} == {BASELINE_BUILD}
            assert {made[job].track for job in doomed_jobs} == {CANDIDATE}
            # The rolled-back candidate's ruleset is not run by the baseline.
            assert {made[job].ruleset_version for job in doomed_jobs} == {"default@1"}
            signed = stack.data_dir / "blobs" / "signed"
            for job in more:
                assert len(list(signed.rglob(f"{job.removeprefix('jobs/')}.pdf"))) == 1

            # The dead candidate's temporary files are swept when a validator
            # next starts on its volume (in Kubernetes its pod's volume goes with it).
            await asyncio.to_thread(stack.stop_service, "validator")
            stack.start_service("validator")
            await asyncio.to_thread(stack.wait_healthy)
            check = run_quire(stack.data_dir, "check")
            assert check.returncode == 0, check.stdout + check.stderr
