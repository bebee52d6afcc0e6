"""A new ruleset version reaches jobs that name no version only through its
rollout (issue 38), on the real stack.

The stack's validator reads its rulesets from a directory of the test's
(the shipped ones). ``default-2.json`` is then added and the validator
restarted, as an operator loads a version:

- loaded but not rolled out, default@2 serves no job naming no version:
  they are pinned to the current version, default@1, and run it (the
  ledger's ``ruleset_version`` on the ACCEPTED and validator entries); a job
  naming default@2 runs it;
- a 50 % validate rollout of default@2 splits such jobs: candidate-track
  ones run default@2, baseline ones default@1, all pinned to default@1;
- after the rollback they all run default@1 again;
- a promoted rollout makes default@2 current for the jobs accepted after,
  and the ledger's operators' chain records the change (from, to, the
  rollout, the operator); the rollback recorded none.

And a published ruleset edited in place: the validator refuses to start,
once, with exit status 2 and one line naming the file and the version, no
traceback, and the stack does not start it again. ``quire up`` with a file
that is no ruleset stops with that line (exit status 2), no traceback, the
validator tried once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.reasons import ReasonCode
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.ledger import ledger_entries
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT, run_quire
from quire.tracks import BASELINE, CANDIDATE
from quire.type import queue_pb2

pytestmark = pytest.mark.stack

SHIPPED = Path(__file__).resolve().parent.parent / (
    "services/validator/quire/validator/shipped_rulesets"
)
OLD, NEW = "default@1", "default@2"
HALF = 5000
"""A 50 % share, in basis points."""
MOST_SPLIT_JOBS = 48
"""The 50 % rollout's jobs are sent until each track has a few (at most this many)."""
WAIT_SECONDS = 180.0


@dataclass(frozen=True)
class RulesetStack:
    stack: Stack
    info: StackInfo
    rulesets: Path
    """The validator's QUIRE_RULESETS_DIR."""


@pytest.fixture(scope="module")
def ruleset_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RulesetStack]:
    """A private stack whose validator reads the rulesets of a directory the
    tests change (a rollout and a promotion would change what every other
    test's jobs run on a shared stack)."""
    root = tmp_path_factory.mktemp("ruleset-canary")
    rulesets = root / "rulesets"
    rulesets.mkdir()
    for path in SHIPPED.glob("*.json"):
        shutil.copy(path, rulesets / path.name)
    stack = Stack(
        root / "stack",
        env={
            "QUIRE_RULESETS_DIR": str(rulesets),
            "QUIRE_QUEUE_AGE_BUDGET_SECONDS": "3600",
            "QUIRE_DRAIN_SECONDS": "3",
        },
    )
    info = stack.start()
    try:
        yield RulesetStack(stack, info, rulesets)
    finally:
        stack.stop()


@pytest.fixture
async def client(ruleset_stack: RulesetStack) -> AsyncIterator[AdmissionClient]:
    """The development tenant on the private stack."""
    info = ruleset_stack.info
    async with AdmissionClient(info.endpoints["admission"], info.token()) as connected:
        yield connected


async def _restart_validator(stack: Stack) -> None:
    await asyncio.to_thread(stack.stop_service, "validator")
    stack.start_service("validator")
    await asyncio.to_thread(stack.wait_healthy, 60)


async def _submit(client: AdmissionClient, folder: Path, count: int, ruleset: str = "") -> dict:
    """``count`` one-page jobs: job name -> track."""
    folder.mkdir(parents=True, exist_ok=True)
    tracks: dict[str, str] = {}
    for _ in range(count):
        path = write_text_pdf(folder / f"{uuid.uuid4().hex}.pdf", [uuid.uuid4().hex])
        digest = (await client.upload(path)).sha256
        job = await client.submit([PacketItem("a", digest)], ruleset=ruleset)
        tracks[job.name] = job.track
    return tracks


async def _rulesets_run(
    client: AdmissionClient, data_dir: Path, jobs: list[str]
) -> dict[str, tuple[str, str]]:
    """Each job, once COMPLETED: (the version it was pinned to on its ACCEPTED
    entry, the version its validator entry says ran)."""
    ran: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + WAIT_SECONDS
    for job in jobs:
        done = await client.wait(job, timeout=max(1.0, deadline - time.monotonic()))
        assert state_name(done.state) == "COMPLETED", (job, done)
        entries = [entry.event for entry in await ledger_entries(data_dir, job)]
        accepted = next(e for e in entries if state_name(e.to_state) == "ACCEPTED")
        validated = next(
            e
            for e in entries
            if e.actor.service == "validator" and state_name(e.to_state) == "ASSEMBLING"
        )
        ran[job] = (accepted.ruleset_version, validated.ruleset_version)
    return ran


async def _until_loaded(client: AdmissionClient, folder: Path, key: str) -> str:
    """A job naming ``key``, accepted once admission's catalog lists it
    (it is read again every few seconds)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return next(iter(await _submit(client, folder, 1, ruleset=key)))
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.INVALID_ARGUMENT or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def _ruleset_changes(data_dir: Path) -> list[queue_pb2.TransitionEvent]:
    """The ledger's ruleset-change entries, in ledger order (read-only)."""
    path = data_dir / "audit" / "audit.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT event FROM ledger WHERE reason_code = ? ORDER BY sequence",
            (ReasonCode.RULESET_CURRENT_CHANGED.value,),
        )
        return [queue_pb2.TransitionEvent.FromString(row[0]) for row in rows]


async def _changes_recorded(data_dir: Path, count: int) -> list[queue_pb2.TransitionEvent]:
    deadline = time.monotonic() + 30
    while len(changes := _ruleset_changes(data_dir)) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    return changes


def _default_2(rulesets: Path) -> None:
    """default@2: default@1 under a new version (so it decides alike)."""
    body = json.loads((rulesets / "default-1.json").read_text())
    body.update(version="2", description=f"{body.get('description', '')} (version 2)")
    (rulesets / "default-2.json").write_text(json.dumps(body))


async def test_a_new_ruleset_version_reaches_unpinned_jobs_only_through_its_rollout(
    ruleset_stack: RulesetStack, client: AdmissionClient, tmp_path: Path
) -> None:
    stack, data_dir = ruleset_stack.stack, ruleset_stack.stack.data_dir
    before = await _submit(client, tmp_path / "before", 1)
    assert set((await _rulesets_run(client, data_dir, list(before))).values()) == {(OLD, OLD)}

    # The operator loads default@2: a new file, and the validator restarted.
    _default_2(ruleset_stack.rulesets)
    await _restart_validator(stack)
    named = await _until_loaded(client, tmp_path / "named", NEW)
    assert (await _rulesets_run(client, data_dir, [named]))[named] == (NEW, NEW)

    # Loaded, not rolled out: jobs naming no version (or only the name) keep default@1.
    unrolled = {
        **await _submit(client, tmp_path / "unrolled", 3),
        **await _submit(client, tmp_path / "by-name", 1, ruleset="default"),
    }
    assert set(unrolled.values()) == {""}  # no rollout open
    ran = await _rulesets_run(client, data_dir, list(unrolled))
    assert set(ran.values()) == {(OLD, OLD)}, ran

    token = ruleset_stack.info.operator_token()
    async with TenantAdminClient(ruleset_stack.info.endpoints["admission"], token) as admin:
        refused = await _refused(
            admin.start_rollout(
                stage="validate",
                candidate_ruleset="default@9",
                share_basis_points=HALF,
                concurrency_cap=4,
            )
        )
        assert (refused.code(), reason_of(refused)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ROLLOUT",
        )

        # A 50 % rollout splits them: candidates run default@2, the rest default@1.
        canary = await admin.start_rollout(
            stage="validate", candidate_ruleset=NEW, share_basis_points=HALF, concurrency_cap=4
        )
        split: dict[str, str] = {}
        while len(split) < MOST_SPLIT_JOBS and not all(
            sum(track == side for track in split.values()) >= 2 for side in (CANDIDATE, BASELINE)
        ):
            split |= await _submit(client, tmp_path / "split", 4)
        ran = await _rulesets_run(client, data_dir, list(split))
        by_track = {(split[job], pinned, run) for job, (pinned, run) in ran.items()}
        assert by_track == {(CANDIDATE, OLD, NEW), (BASELINE, OLD, OLD)}, by_track

        # Rolled back: every job naming no version runs default@1 again.
        await admin.rollback_rollout(canary.name)
        assert await _current(admin) == OLD
        back = await _submit(client, tmp_path / "back", 3)
        assert set(back.values()) == {""}
        ran = await _rulesets_run(client, data_dir, list(back))
        assert set(ran.values()) == {(OLD, OLD)}, ran

        # Promoted: default@2 is current for the jobs accepted after.
        promoted = await admin.start_rollout(
            stage="validate", candidate_ruleset=NEW, share_basis_points=HALF, concurrency_cap=4
        )
        await admin.promote_rollout(promoted.name)
        assert await _current(admin) == NEW
    after = await _submit(client, tmp_path / "after", 3)
    pinned_old = await _submit(client, tmp_path / "pinned", 1, ruleset=OLD)
    ran = await _rulesets_run(client, data_dir, [*after, *pinned_old])
    assert {ran[job] for job in after} == {(NEW, NEW)}, ran
    assert {ran[job] for job in pinned_old} == {(OLD, OLD)}  # a named version is kept

    # The ledger: the promotion, from default@1 to default@2, by the operator,
    # on the operators' chain; the rollback changed nothing.
    changes = await _changes_recorded(data_dir, 1)
    assert [
        (e.ruleset_change.name, e.ruleset_change.previous_version, e.ruleset_version)
        for e in changes
    ] == [("default", OLD, NEW)], changes
    promotion = changes[0]
    assert (promotion.tenant, promotion.job, promotion.ruleset_change.cause) == (
        "operators",
        "",
        "PROMOTED",
    )
    assert promotion.ruleset_change.rollout == promoted.name
    assert promotion.actor.service == "operator" and promotion.actor.instance
    status = run_quire(data_dir, "rollout", "status", "--json")
    assert status.returncode == 0, status.stderr
    shown = {r["name"]: r["version"] for r in json.loads(status.stdout)["current_rulesets"]}
    assert shown["default"] == NEW and shown["lease-renewal"] == "lease-renewal@1", shown
    checked = run_quire(data_dir, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verified = run_quire(data_dir, "audit", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def _current(admin: TenantAdminClient) -> str:
    """The current version of ``default``, as operators read it."""
    current = {r.name: r.version for r in await admin.list_current_rulesets()}
    return current["default"]


async def _refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call  # type: ignore[misc]
    return refused.value


async def test_a_published_ruleset_edited_in_place_refuses_the_validator_start_once(
    ruleset_stack: RulesetStack,
) -> None:
    stack = ruleset_stack.stack
    published = ruleset_stack.rulesets / "default-1.json"
    original = published.read_text()
    body = json.loads(original)
    body["description"] = f"{body.get('description', '')} (edited in place)"
    log = stack.data_dir / "logs" / "validator.log"
    await asyncio.to_thread(stack.stop_service, "validator")
    start = log.stat().st_size
    published.write_text(json.dumps(body))
    try:
        stack.start_service("validator")
        restarts = stack.restarts("validator")
        deadline = time.monotonic() + 60
        while stack.exit_status("validator") is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert stack.exit_status("validator") == 2
        await asyncio.sleep(2.0)  # ten looks of the stack's watcher: no restart
        assert stack.restarts("validator") == restarts
        assert stack.exit_status("validator") == 2
        with open(log, "rb") as output:
            output.seek(start)
            said = output.read().decode(errors="replace")
        assert "Traceback" not in said, said
        lines = [line for line in said.splitlines() if "cannot start" in line]
        assert len(lines) == 1, said
        assert str(published) in lines[0] and OLD in lines[0], lines[0]
        assert stack.refusal("validator") == lines[0]
    finally:
        published.write_text(original)
        await _restart_validator(stack)


def test_quire_up_with_a_file_that_is_no_ruleset_says_so_once_without_a_traceback(
    tmp_path: Path,
) -> None:
    rulesets = tmp_path / "rulesets"
    rulesets.mkdir()
    broken = rulesets / "default-1.json"
    broken.write_text('{"name": "default", "version": "1", "rules": [')
    data_dir = tmp_path / "stack"
    up = subprocess.run(
        [*QUIRE, "--data-dir", str(data_dir), "up"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "QUIRE_RULESETS_DIR": str(rulesets)},
    )
    assert up.returncode == 2, up.stdout + up.stderr
    assert "Traceback" not in up.stderr, up.stderr
    said = up.stderr.strip().splitlines()[-1]
    assert "quire-validator: cannot start: QUIRE_RULESETS_DIR: " in said, up.stderr
    assert str(broken) in said and "not JSON" in said, said
    log = (data_dir / "logs" / "validator.log").read_text()
    assert log.count("cannot start") == 1, log  # tried once, not once per startup attempt
    assert "Traceback" not in log, log
