"""Each ruleset name's current version (issue 38), without a stack: what a job
naming no version is pinned to, how a name is adopted on first sight, what a
promotion changes, and the promotion's ledger entry on the operators' chain.
The whole story on a running stack is tests/test_ruleset_canary.py's."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf import timestamp_pb2
from sqlalchemy import select

from quire.admission import tables as admission_tables
from quire.admission.rollouts.records import PROMOTED, RolloutRecord
from quire.admission.rulesets.catalog import resolve_ruleset
from quire.admission.rulesets.currents import CurrentRulesets, adopt, promote, read_current
from quire.admission.rulesets.ledger import RulesetLedger
from quire.audit import tables as audit_tables
from quire.audit.rulesetchanges import CHAIN, record_ruleset_change
from quire.audit.v1 import audit_service_pb2
from quire.audit.verification import verify_ledger
from quire.database import Database
from quire.errors import InvalidInput
from quire.jobview import fold
from quire.reasons import ReasonCode
from quire.type import queue_pb2

KNOWN = frozenset({"default@1", "lease-renewal@1"})


@pytest.fixture
def admission(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", admission_tables.metadata)
    database.create_schema()
    return database


@pytest.fixture
def audit(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", audit_tables.metadata)
    database.create_schema()
    return database


def _rollout(candidate_ruleset: str) -> RolloutRecord:
    """A promoted rollout, as ``rollouts.promote`` returns it."""
    now = datetime.now(UTC)
    return RolloutRecord(
        id="r1",
        stage="validate",
        candidate_version="",
        candidate_ruleset=candidate_ruleset,
        share_basis_points=10_000,
        canary_share_basis_points=5_000,
        tenants=(),
        concurrency_cap=2,
        state=PROMOTED,
        created_at=now,
        updated_at=now,
    )


def test_a_name_is_adopted_at_its_newest_version_when_first_seen_and_kept_after(
    admission: Database,
) -> None:
    first = frozenset({"default@1", "default@2", "lease-renewal@1"})
    assert admission.transaction(lambda s: adopt(s, first)) == ["default", "lease-renewal"]
    later = first | {"default@3", "lease-renewal@2", "invoice@4", "invoice@10"}
    assert admission.transaction(lambda s: adopt(s, later)) == ["invoice"]
    assert admission.transaction(read_current) == {
        "default": "default@2",  # what was newest when first seen, not default@3
        "lease-renewal": "lease-renewal@1",
        "invoice": "invoice@10",  # versions compare as numbers
    }


def test_a_job_naming_no_version_gets_the_current_one_and_a_named_version_is_kept() -> None:
    known = frozenset({"default@1", "default@2", "lease-renewal@1"})
    current = {"default": "default@1", "lease-renewal": "lease-renewal@1"}
    assert resolve_ruleset("", known, current) == "default@1"
    assert resolve_ruleset("default", known, current) == "default@1"
    assert resolve_ruleset("default@2", known, current) == "default@2"
    assert resolve_ruleset("lease-renewal", known, current) == "lease-renewal@1"
    assert resolve_ruleset("default@9", known, current) is None
    assert resolve_ruleset("unknown", known, current) is None


def test_a_promotion_makes_its_candidate_current_and_is_kept_for_the_ledger(
    admission: Database,
) -> None:
    admission.transaction(lambda s: adopt(s, KNOWN))
    changed = admission.transaction(
        lambda s: promote(s, _rollout("default@2"), operator="op1", build_version="1.2.3")
    )
    assert changed
    assert admission.transaction(read_current)["default"] == "default@2"
    again = admission.transaction(
        lambda s: promote(s, _rollout("default@2"), operator="op1", build_version="1.2.3")
    )
    assert not again, "already current: no second change"
    assert not admission.transaction(
        lambda s: promote(s, _rollout(""), operator="op1", build_version="1.2.3")
    ), "a rollout of workers only changes no ruleset"
    rows = admission.transaction(
        lambda s: s.execute(select(admission_tables.ruleset_changes)).all()
    )
    assert [
        (r.name, r.previous_version, r.current_version, r.rollout, r.operator, r.recorded_at)
        for r in rows
    ] == [("default", "default@1", "default@2", "rollouts/r1", "op1", None)]


async def test_the_current_versions_are_read_once_a_second_and_at_once_after_a_change(
    admission: Database,
) -> None:
    now = [100.0]
    currents = CurrentRulesets(admission, clock=lambda: now[0])
    assert await currents.versions(KNOWN) == {
        "default": "default@1",
        "lease-renewal": "lease-renewal@1",
    }
    admission.transaction(
        lambda s: promote(s, _rollout("default@2"), operator="op1", build_version="1")
    )
    assert (await currents.versions(KNOWN))["default"] == "default@1"  # kept for a second
    currents.changed()
    assert (await currents.versions(KNOWN))["default"] == "default@2"
    bigger = KNOWN | {"invoice@3"}
    assert (await currents.versions(bigger))["invoice"] == "invoice@3"  # a new name: adopted


def _change(previous: str = "default@1") -> queue_pb2.RulesetChange:
    return queue_pb2.RulesetChange(
        name="default",
        previous_version=previous,
        current_version="default@2",
        cause="PROMOTED",
        rollout="rollouts/r1",
    )


OPERATOR = queue_pb2.Actor(service="operator", instance="op1", build_version="1.2.3")


def _now() -> timestamp_pb2.Timestamp:
    moment = timestamp_pb2.Timestamp()
    moment.GetCurrentTime()
    return moment


def test_a_promotion_is_appended_once_on_the_operators_chain_and_moves_no_job(
    audit: Database,
) -> None:
    first = audit.transaction(lambda s: record_ruleset_change(s, _change(), _now(), OPERATOR))
    again = audit.transaction(lambda s: record_ruleset_change(s, _change(), _now(), OPERATOR))
    assert first == (first[0], True) and again == (first[0], False)
    rows = audit.transaction(lambda s: s.execute(select(audit_tables.ledger)).all())
    assert [(r.tenant, r.job, r.reason_code) for r in rows] == [
        (CHAIN, "", ReasonCode.RULESET_CURRENT_CHANGED)
    ]
    event = queue_pb2.TransitionEvent.FromString(rows[0].event)
    assert (event.ruleset_version, event.ruleset_change.previous_version) == (
        "default@2",
        "default@1",
    )
    assert fold([event]) is None, "no job's view takes it"
    assert audit.transaction(lambda s: s.execute(select(audit_tables.jobs)).all()) == []
    assert audit.transaction(lambda s: verify_ledger(s, [])).ok


@pytest.mark.parametrize(
    ("change", "actor", "field"),
    [
        (
            queue_pb2.RulesetChange(
                name="default", current_version="other@2", cause="PROMOTED", rollout="rollouts/r1"
            ),
            OPERATOR,
            "change.current_version",
        ),
        (_change(previous="default@x"), OPERATOR, "change.previous_version"),
        (
            queue_pb2.RulesetChange(
                name="default", current_version="default@2", cause="ADOPTED", rollout="rollouts/r1"
            ),
            OPERATOR,
            "change.cause",
        ),
        (
            queue_pb2.RulesetChange(name="default", current_version="default@2", cause="PROMOTED"),
            OPERATOR,
            "change.rollout",
        ),
        (_change(), queue_pb2.Actor(service="validator", instance="v"), "actor.service"),
        (_change(), queue_pb2.Actor(service="operator"), "actor.instance"),
    ],
)
def test_a_malformed_ruleset_change_is_refused_and_appends_nothing(
    audit: Database, change: queue_pb2.RulesetChange, actor: queue_pb2.Actor, field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        audit.transaction(lambda s: record_ruleset_change(s, change, _now(), actor))
    assert refused.value.reason == ReasonCode.INVALID_ROLLOUT
    assert field in {violation.field for violation in refused.value.violations}
    assert audit.transaction(lambda s: s.execute(select(audit_tables.ledger)).all()) == []


class _Audit:
    """Audit's RecordRulesetChange, away for the first ``away`` calls (a unit
    test of the ledger's retrying around it; the stack test uses the real one)."""

    def __init__(self, database: Database, away: int) -> None:
        self._db, self._away, self.calls = database, away, 0

    async def RecordRulesetChange(  # noqa: N802 - gRPC method name
        self, request: audit_service_pb2.RecordRulesetChangeRequest, timeout: float
    ) -> audit_service_pb2.RecordRulesetChangeResponse:
        self.calls += 1
        if self.calls <= self._away:
            raise ConnectionError("audit away")
        event_id, appended = self._db.transaction(
            lambda s: record_ruleset_change(s, request.change, request.change_time, request.actor)
        )
        return audit_service_pb2.RecordRulesetChangeResponse(event_id=event_id, appended=appended)


async def test_a_promotion_reaches_the_ledger_once_audit_answers(
    admission: Database, audit: Database
) -> None:
    admission.transaction(lambda s: adopt(s, KNOWN))
    admission.transaction(
        lambda s: promote(s, _rollout("default@2"), operator="op1", build_version="1.2.3")
    )
    stub = _Audit(audit, away=1)
    ledger = RulesetLedger(
        admission,
        stub,  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
        currents=CurrentRulesets(admission),
    )
    with pytest.raises(ConnectionError):
        await ledger.record_pending()
    assert await ledger.record_pending() == 1
    assert await ledger.record_pending() == 0, "recorded: not asked again"
    rows = audit.transaction(lambda s: s.execute(select(audit_tables.ledger)).all())
    event = queue_pb2.TransitionEvent.FromString(rows[0].event)
    assert (len(rows), event.actor.service, event.actor.instance) == (1, "operator", "op1")
    assert event.ruleset_change.rollout == "rollouts/r1"
