"""Track pinning (issue 20, tracks): ``quire.tracks.track_of`` is a pure
function of the job id (and the tenant when a rollout names tenants), and
admission's rollout records move only CANARY → PROMOTED or ROLLED_BACK, at
most one open per stage, never deleted. The stack test is
tests/test_rollouts_stack.py."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from quire.admission import tables
from quire.admission.rollouts import records as rollouts
from quire.admission.v1 import rollout_pb2
from quire.database import Database
from quire.errors import FailedPrecondition, InvalidInput
from quire.jobs import new_job_id
from quire.migrations import apply_migrations
from quire.reasons import ReasonCode
from quire.tracks import BASELINE, CANDIDATE, bucket, track_for, track_of


@dataclass
class Share:
    share_basis_points: int
    tenants: list[str] = field(default_factory=list)


def test_the_bucket_is_sha256_of_the_job_id_first_eight_bytes_mod_10000() -> None:
    job = new_job_id()
    expected = int.from_bytes(hashlib.sha256(job.encode()).digest()[:8], "big") % 10_000
    assert bucket(job) == bucket(f"jobs/{job}") == expected


def test_track_of_is_deterministic_and_near_its_share() -> None:
    ids = [new_job_id() for _ in range(100_000)]
    for basis in (1000, 500, 2500):
        tracks = [track_of(job, Share(basis)) for job in ids]
        assert tracks == [track_of(job, Share(basis)) for job in ids]
        share = tracks.count(CANDIDATE) / len(ids)
        # 100,000 ids: the standard deviation is under 0.14 %; 0.6 % is > 4 of them.
        assert abs(share - basis / 10_000) < 0.006, (basis, share)


def test_no_share_is_all_baseline_and_the_whole_share_all_candidate() -> None:
    ids = [uuid.uuid4().hex for _ in range(5000)]
    assert {track_of(job, Share(0)) for job in ids} == {BASELINE}
    assert {track_of(job, Share(10_000)) for job in ids} == {CANDIDATE}


def test_a_rollout_naming_tenants_pins_only_their_jobs() -> None:
    ids = [new_job_id() for _ in range(2000)]
    only_a = Share(10_000, ["tenants/a"])
    assert {track_of(job, only_a, "tenants/a") for job in ids} == {CANDIDATE}
    assert {track_of(job, only_a, "a") for job in ids} == {CANDIDATE}
    assert {track_of(job, only_a, "tenants/b") for job in ids} == {BASELINE}
    half = Share(5000, ["tenants/a"])
    assert [track_of(job, half, "a") for job in ids] == [
        CANDIDATE if bucket(job) < 5000 else BASELINE for job in ids
    ]


def test_one_track_per_job_candidate_only_for_every_open_rollout() -> None:
    ids = [new_job_id() for _ in range(20_000)]
    assert {track_for(job, "t", []) for job in ids} == {""}
    both = [Share(1000), Share(3000)]
    tracks = [track_for(job, "t", both) for job in ids]
    assert tracks == [CANDIDATE if bucket(job) < 1000 else BASELINE for job in ids]
    assert track_for(ids[0], "t", [Share(10_000), Share(10_000, ["tenants/x"])]) == BASELINE


@pytest.fixture
def database(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    apply_migrations(db, tables.metadata, tables.MIGRATIONS)
    db.transaction(
        lambda s: s.execute(
            tables.tenants.insert(), {"id": "t1", "name": "one", "created_at": datetime.now(UTC)}
        )
    )
    return db


def _wanted(**fields: object) -> rollout_pb2.Rollout:
    values: dict[str, object] = {
        "stage": "validate",
        "candidate_version": "2026.12.2",
        "share_basis_points": 1000,
        "concurrency_cap": 4,
    }
    values.update(fields)
    return rollouts.checked_rollout(rollout_pb2.Rollout(**values))  # type: ignore[arg-type]


def test_one_open_rollout_per_stage_and_closing_only_an_open_one(database: Database) -> None:
    first = database.transaction(lambda s: rollouts.start(s, _wanted()))
    assert (first.state, first.share_basis_points) == (rollouts.CANARY, 1000)
    with pytest.raises(FailedPrecondition) as refused:
        database.transaction(lambda s: rollouts.start(s, _wanted(candidate_version="other")))
    assert refused.value.reason == ReasonCode.ROLLOUT_OPEN
    other_stage = database.transaction(lambda s: rollouts.start(s, _wanted(stage="sign")))
    assert {r.id for r in database.transaction(rollouts.read_open)} == {first.id, other_stage.id}

    back = database.transaction(lambda s: rollouts.roll_back(s, first.id))
    assert (back.state, back.share_basis_points, back.canary_share_basis_points) == (
        rollouts.ROLLED_BACK,
        0,
        1000,
    )
    for close in (rollouts.roll_back, rollouts.promote):
        with pytest.raises(FailedPrecondition) as refused:
            database.transaction(lambda s, close=close: close(s, first.id))  # type: ignore[misc]
        assert refused.value.reason == ReasonCode.ROLLOUT_NOT_OPEN
    second = database.transaction(lambda s: rollouts.start(s, _wanted(share_basis_points=2500)))
    promoted = database.transaction(lambda s: rollouts.promote(s, second.id))
    assert (promoted.state, promoted.share_basis_points) == (rollouts.PROMOTED, 10_000)
    listed = database.transaction(lambda s: rollouts.list_rollouts(s, stage="validate"))
    assert [r.id for r in listed] == [second.id, first.id]  # newest first, none deleted
    database.close()


def test_invalid_rollouts_name_their_fields(database: Database) -> None:
    with pytest.raises(InvalidInput) as refused:
        rollouts.checked_rollout(
            rollout_pb2.Rollout(
                stage="commit",
                candidate_ruleset="not a ruleset",
                share_basis_points=10_001,
                concurrency_cap=0,
                tenants=["nobody"],
            )
        )
    fields = {v.field for v in refused.value.violations}
    assert refused.value.reason == ReasonCode.INVALID_ROLLOUT
    assert fields == {
        "rollout.stage",
        "rollout.candidate_ruleset",
        "rollout.share_basis_points",
        "rollout.concurrency_cap",
        "rollout.tenants[0]",
    }
    with pytest.raises(InvalidInput) as refused:
        _wanted(stage="sign", candidate_ruleset="default@2")
    assert [v.field for v in refused.value.violations] == ["rollout.candidate_ruleset"]
    with pytest.raises(InvalidInput) as refused:
        database.transaction(lambda s: rollouts.start(s, _wanted(tenants=["tenants/zz"])))
    assert [v.field for v in refused.value.violations] == ["rollout.tenants[0]"]
    database.close()


def test_the_open_rollouts_are_read_at_most_once_a_second_or_on_change(
    database: Database,
) -> None:
    now = [100.0]
    cache = rollouts.OpenRollouts(clock=lambda: now[0])
    assert database.transaction(cache.snapshot) == ()
    started = database.transaction(lambda s: rollouts.start(s, _wanted()))
    assert database.transaction(cache.snapshot) == ()  # cached: no read
    now[0] += 1.0
    assert [r.id for r in database.transaction(cache.snapshot)] == [started.id]
    database.transaction(lambda s: rollouts.roll_back(s, started.id))
    cache.changed()
    assert database.transaction(cache.snapshot) == ()
    database.close()
