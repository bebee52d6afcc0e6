"""A rollout's comparison on the real stack (issue 20): audit's
``CompareTracks`` reports the window's jobs on their tracks with their
endings, and ``quire rollout status --shadow N`` runs the candidate ruleset
over the baseline's completed jobs and reports the decisions that differ,
while the ledger, the signatures and the artifacts stay as they were.

The session stack is used: the rollout names only this test's fresh tenant,
so other tests' jobs are never candidates (while it is open they are pinned
``baseline``, which no other test looks at), and it is rolled back at the
end. The candidate ruleset is the shipped ``lease-renewal@1`` (the validator
loads its rulesets from a directory at start; a second version of one cannot
be published from a test without a private stack): a lease that lacks the
tenant's signature passes ``default@1`` (structural checks only) and fails
``lease-renewal@1``'s required field. Candidate jobs are only required to
be reported as they stand: once routing by track sends them to a candidate
worker that this stack does not run, they may still be waiting.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest

from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem, RolloutReadsClient, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_form_pdf
from quire.testing.quirecli import run_quire
from quire.tls import aio_channel
from quire.tracks import BASELINE, CANDIDATE

pytestmark = pytest.mark.stack

TERMINAL = frozenset({"COMPLETED", "REJECTED", "FAILED", "CANCELLED"})

CANDIDATE_RULESET = "lease-renewal@1"
CLAUSES = (
    "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure attached."
)
UNSIGNED = {"property_address": "1 Main St", "landlord_signature": "B. Landlord"}
MOST_JOBS = 24
"""Submitted until each track has two jobs (at a 50 % share, fewer than two on a
track after 24 jobs has a chance of about 1.5e-6)."""


async def _submit(client: AdmissionClient, digest: str, ruleset: str = "") -> Any:
    """Accepted, retrying while the pipeline sheds load (QUEUE_BACKLOG)."""
    for _ in range(300):
        try:
            return await client.submit([PacketItem("lease", digest)], ruleset=ruleset)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("never accepted")


def _rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(db.execute(query))


class Records:
    """What the pipeline recorded of some jobs, to compare before and after."""

    def __init__(self, info: StackInfo, data: Path, client: AdmissionClient) -> None:
        self._info = info
        self._data = data
        self._client = client

    async def ledger_size(self) -> int:
        async with aio_channel(self._info.endpoints["audit"], None) as channel:
            report = await agrpc.AuditServiceStub(channel).VerifyLedger(
                apb.VerifyLedgerRequest(), metadata=bearer_metadata(self._info.operator_token())
            )
        assert report.ok
        return report.entries

    async def settled_ledger_size(self) -> int:
        """The ledger's entry count once it has stopped growing (other tests'
        late entries landing)."""
        size = await self.ledger_size()
        for _ in range(20):
            await asyncio.sleep(1.0)
            again = await self.ledger_size()
            if again == size:
                return size
            size = again
        raise AssertionError("the ledger never settled")

    async def of(self, jobs: list[str], tmp_path: Path) -> dict[str, Any]:
        metadata = bearer_metadata(self._info.operator_token())
        entries: dict[str, list[str]] = {}
        signatures: dict[str, bytes] = {}
        artifacts: dict[str, str] = {}
        async with (
            aio_channel(self._info.endpoints["audit"], None) as audit,
            aio_channel(self._info.endpoints["signer"], None) as signer,
        ):
            for job in jobs:
                reply = await agrpc.AuditServiceStub(audit).ListJobEvents(
                    apb.ListJobEventsRequest(job=job, page_size=100), metadata=metadata
                )
                entries[job] = [entry.entry_hash for entry in reply.entries]
                view = await self._client.get_job(job)
                if state_name(view.state) == "COMPLETED":
                    signature = await sgrpc.SignerServiceStub(signer).GetSignature(
                        spb.GetSignatureRequest(job=job), metadata=metadata
                    )
                    signatures[job] = signature.SerializeToString(deterministic=True)
                    out = tmp_path / f"{uuid.uuid4().hex}.pdf"
                    artifacts[job] = await self._client.download(job, out)
                    assert artifacts[job] == view.output_digest
        return {
            "entries": entries,
            "signatures": signatures,
            "artifacts": artifacts,
            "ledger_rows": _rows(self._data / "audit" / "audit.db", "SELECT count(*) FROM ledger"),
            "signer_rows": _rows(
                self._data / "signer" / "signer.db", "SELECT count(*) FROM signatures"
            ),
            "validations": _rows(
                self._data / "validator" / "validator.db",
                "SELECT job, verdict, reason_code, ruleset FROM validations ORDER BY job",
            ),
        }


async def test_compare_tracks_and_a_shadow_evaluation_that_records_nothing(
    stack,
    tenants,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    info = StackInfo.read(stack.data_dir)
    client: AdmissionClient = await tenants("compare")
    tenant = client.tenant  # type: ignore[attr-defined]
    admin: TenantAdminClient = tenants.admin
    marker = uuid.uuid4().hex  # document text: never in any output
    pdf = write_form_pdf(tmp_path / "lease.pdf", [CLAUSES, marker], UNSIGNED)
    digest = (await client.upload(pdf)).sha256

    rollout = await admin.start_rollout(
        stage="validate",
        candidate_ruleset=CANDIDATE_RULESET,
        share_basis_points=5000,
        concurrency_cap=4,
        tenants=[tenant],
    )
    try:
        # A few jobs on each track (the track is a function of the random job
        # id), and one judged by lease-renewal@1 itself: REJECTED.
        tracks: dict[str, str] = {}
        rejected = await _submit(client, digest, ruleset="lease-renewal")
        tracks[rejected.name] = rejected.track
        while len(tracks) < MOST_JOBS and (
            sum(t == CANDIDATE for t in tracks.values()) < 2
            or sum(t == BASELINE for t in tracks.values()) < 2
        ):
            job = await _submit(client, digest)
            tracks[job.name] = job.track
        assert set(tracks.values()) <= {CANDIDATE, BASELINE}
        assert sorted(Counter(tracks.values()).values())[0] >= 2 and len(set(tracks.values())) == 2
        endings = dict(await asyncio.gather(*(_ending(client, job, tracks[job]) for job in tracks)))
        baseline = [job for job in tracks if tracks[job] == BASELINE]
        # The baseline runs default@1 (or the rejected job's own lease-renewal@1).
        assert {job: endings[job] for job in baseline} == {
            job: "REJECTED" if job == rejected.name else "COMPLETED" for job in baseline
        }

        await _compare(info, rollout, tracks, endings)
        await _shadow(stack, info, client, rollout, tracks, endings, tmp_path, marker)
    finally:
        closed = await admin.rollback_rollout(rollout.name)

    # Closed: the window ends when the rollout was rolled back; nothing moved.
    status = run_quire(stack.data_dir, "rollout", "status", closed.name, "--json")
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert document["rollouts"][0]["state"] == "ROLLED_BACK"
    (comparison,) = document["comparisons"]
    assert comparison["window"]["end"] != "now"
    mine = Counter(tracks.values())
    assert comparison["tracks"]["candidate"]["jobs"] == mine[CANDIDATE]


async def _ending(client: AdmissionClient, job: str, track: str) -> tuple[str, str]:
    """The job's state once it ended. A candidate job may wait for a worker
    of the candidate's (once routing by track sends it to the candidate's
    queue): its state after a minute is taken as it is."""
    try:
        final = await client.wait(job, timeout=120 if track == BASELINE else 60)
    except TimeoutError:
        assert track == CANDIDATE, f"a baseline job did not end: {job}"
        final = await client.get_job(job)
    return job, state_name(final.state)


async def _compare(
    info: StackInfo, rollout: Any, tracks: dict[str, str], endings: dict[str, str]
) -> None:
    start = rollout.create_time.ToDatetime()
    async with RolloutReadsClient(
        audit=info.endpoints["audit"],
        validator=info.endpoints["validator"],
        operator_token=info.operator_token(),
    ) as reads:
        summaries = await reads.compare_tracks(start=start, stage="validate", sample_size=50)
        by_track = {summary.track: summary for summary in summaries}
        for track in (CANDIDATE, BASELINE):
            mine = [job for job, pinned in tracks.items() if pinned == track]
            ended = [job for job in mine if endings[job] in TERMINAL]
            want = Counter(endings[job] for job in ended)
            summary = by_track[track]
            if track == CANDIDATE:
                # Only this test's tenant has candidates: exactly its jobs.
                assert summary.jobs == len(mine)
                assert dict(summary.endings) == dict(want)
            else:
                # Other tests' jobs accepted meanwhile are baseline too.
                assert summary.jobs >= len(mine)
                assert all(summary.endings.get(end, 0) >= n for end, n in want.items())
            assert summary.steps >= 2 * len(ended)  # validating, and handing on or ending
            assert all(v.startswith("validator@") for v in summary.versions)
            completed = {job for job in ended if endings[job] == "COMPLETED"}
            assert set(summary.completed_sample) >= completed or (
                len(summary.completed_sample) == 50
            )
            if want["REJECTED"]:
                assert summary.reasons["REQUIRED_FIELD_MISSING"] >= 1
            assert summary.latency_p50_seconds <= summary.latency_p95_seconds
            assert summary.latency_p95_seconds <= summary.latency_p99_seconds
            if ended:
                assert summary.versions and summary.latency_p50_seconds > 0

        # Operators only; an unknown stage is refused with a stable reason.
        request = apb.CompareTracksRequest(stage="nope")
        request.start_time.FromDatetime(start)
        async with aio_channel(info.endpoints["audit"], None) as channel:
            stub = agrpc.AuditServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CompareTracks(request, metadata=bearer_metadata(info.operator_token()))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert reason_of(refused.value) == "INVALID_ROLLOUT"
            with pytest.raises(grpc.aio.AioRpcError) as anonymous:
                await stub.CompareTracks(apb.CompareTracksRequest())
            assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _shadow(
    stack: Any,
    info: StackInfo,
    client: AdmissionClient,
    rollout: Any,
    tracks: dict[str, str],
    endings: dict[str, str],
    tmp_path: Path,
    marker: str,
) -> None:
    records = Records(info, Path(stack.data_dir), client)
    jobs = sorted(tracks)
    size = await records.settled_ledger_size()
    before = await records.of(jobs, tmp_path)

    shadowed = run_quire(
        stack.data_dir, "rollout", "status", rollout.name, "--shadow", "20", "--json"
    )
    assert shadowed.returncode == 0, shadowed.stderr
    (comparison,) = json.loads(shadowed.stdout)["comparisons"]
    shadow = comparison["shadow"]
    assert shadow["ruleset"] == CANDIDATE_RULESET
    assert shadow["evaluated"] == shadow["same"] + shadow["different"]
    assert not shadow["not_evaluated"]
    differences = {diff["job"]: diff for diff in shadow["differences"]}
    baseline_completed = [
        job for job in jobs if tracks[job] == BASELINE and endings[job] == "COMPLETED"
    ]
    assert baseline_completed, "two baseline jobs at least, one at most rejected"
    for job in baseline_completed:
        diff = differences[job]
        assert (diff["recorded"]["ruleset"], diff["recorded"]["verdict"]) == ("default@1", "PASSED")
        assert diff["candidate"] == {
            "ruleset": CANDIDATE_RULESET,
            "verdict": "REJECTED",
            "reason_code": "REQUIRED_FIELD_MISSING",
        }
        assert diff["rules"] and all(
            set(r) == {"rule", "position", "recorded", "candidate"} for r in diff["rules"]
        )
        assert any(r["candidate"] == "fail" for r in diff["rules"])
    assert not set(differences) & {job for job in jobs if tracks[job] == CANDIDATE}

    text = run_quire(stack.data_dir, "rollout", "status", rollout.name, "--shadow", "20")
    assert text.returncode == 0, text.stderr
    assert "candidate" in text.stdout and "baseline" in text.stdout
    assert "retry rate" in text.stdout and "latency p95 (s)" in text.stdout
    assert f"shadow evaluation of {CANDIDATE_RULESET}" in text.stdout
    assert "->REJECTED" in text.stdout.replace(" -> ", "->")
    assert marker not in text.stdout + shadowed.stdout + text.stderr + shadowed.stderr

    await asyncio.sleep(0.5)  # anything written would have landed by now
    assert await records.ledger_size() == size
    assert await records.of(jobs, tmp_path) == before
