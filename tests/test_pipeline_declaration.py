"""The pipeline is declared once (``quire.pipeline``); the tables derived from it
must describe the same pipeline the ledger, the queues and the stages use."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from quire.audit.deadletters import stage_of_consumer
from quire.backoff import Backoff
from quire.errors import Overloaded, TransientError
from quire.jobs import HISTORY_BEFORE_COMPLETION, JobState, state_rank
from quire.natsauth import SERVICE_PERMISSIONS
from quire.pipeline import (
    ENDINGS,
    QUEUED_STAGES,
    STAGES,
    State,
    stage,
    stage_of_service,
    stage_waiting_in,
    stage_working_in,
    steps_of,
)
from quire.reasons import ReasonCode
from quire.settings import QueueSettings
from quire.wire import allowed_producers
from quire.workqueue import PRIORITIES, consumer_name
from quire.workqueue.settle import ACK, LEAVE, TERM, Action, retry, settle


def test_states_are_the_wire_enum() -> None:
    wire = {name.removeprefix("JOB_STATE_") for name in JobState.keys()} - {"UNSPECIFIED"}
    assert {state.value for state in State} == wire
    for state in State:
        assert JobState.Name(state.number) == f"JOB_STATE_{state.value}"  # type: ignore[arg-type]


def test_stages_form_one_chain_from_acceptance_to_completion() -> None:
    assert STAGES[0].waiting is State.ACCEPTED
    assert STAGES[-1].hands_on is State.COMPLETED and STAGES[-1].next is None
    for current, following in zip(STAGES, STAGES[1:], strict=False):
        assert current.next == following.name
        assert current.hands_on is following.waiting, "a hand-off is the next stage's waiting state"
    assert [s.service for s in STAGES] == ["validator", "assembler", "signer", "audit"]
    assert [s.name for s in QUEUED_STAGES] == ["validate", "assemble", "sign"]


def test_history_audit_requires_before_completion() -> None:
    assert HISTORY_BEFORE_COMPLETION == (
        State.ACCEPTED,
        State.VALIDATING,
        State.REVIEWING,
        State.ASSEMBLING,
        State.SIGNING,
        State.COMMITTING,
    )
    ranks = [state_rank(s) for s in (*HISTORY_BEFORE_COMPLETION, State.COMPLETED)]
    assert ranks == sorted(ranks)
    assert state_rank(State.REVIEWING) < state_rank(State.NEEDS_REVIEW)
    assert state_rank(State.NEEDS_REVIEW) < state_rank(State.ASSEMBLING)


def test_each_producer_may_record_only_its_own_steps() -> None:
    assert steps_of("admission") == {State.ACCEPTED, State.CANCELLED}
    assert steps_of("validator") == {
        State.VALIDATING,
        State.REVIEWING,
        State.NEEDS_REVIEW,
        State.ASSEMBLING,
        *ENDINGS,
    }
    assert steps_of("assembler") == {State.ASSEMBLING, State.SIGNING, *ENDINGS}
    assert steps_of("signer") == {State.SIGNING, State.COMMITTING, *ENDINGS}
    assert steps_of("audit") == {State.FAILED, State.CANCELLED}
    assert State.COMPLETED not in set().union(*(steps_of(s.service) for s in STAGES))
    assert steps_of("stranger") == frozenset()


def test_lookups_by_state_service_and_consumer() -> None:
    assert stage_of_service("signer") is stage("sign")
    assert stage_of_service("admission") is None
    assert stage_waiting_in(State.ACCEPTED) is stage("validate")
    assert stage_waiting_in(State.VALIDATING) is None
    assert stage_working_in(State.VALIDATING) is stage("validate")
    assert stage_working_in(State.COMMITTING) is stage("commit")
    assert stage_working_in(State.REVIEWING) is None, "a job in review waits on no queue"
    for each in STAGES:
        for priority in PRIORITIES:
            assert stage_of_consumer(consumer_name(each.name, priority)) is each
    assert stage_of_consumer("validator-interactive") is None
    assert stage_of_consumer("") is None


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    backoff = QueueSettings(backoff_base_seconds=0.5, backoff_cap_seconds=4.0).backoff
    for attempt, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0), (500, 4.0)):
        delays = [backoff.delay(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), attempt
    assert backoff.delay(0) <= 0.5


def test_retry_honours_the_delay_an_error_asks_for() -> None:
    backoff = Backoff(base_seconds=0.5, cap_seconds=30.0)
    asked = retry(backoff, 7, Overloaded(ReasonCode.INTERNAL, retry_after=2.5))
    assert (asked.action, asked.delay_seconds) == (Action.RETRY, 2.5)
    plain = retry(backoff, 1, TransientError(ReasonCode.INTERNAL))
    assert plain.action is Action.RETRY and 0.25 <= plain.delay_seconds <= 0.5
    assert retry(backoff, 2, RuntimeError("x")).delay_seconds <= 1.0


@dataclass
class _Message:
    """Records what was done to it (the settle function under test is real)."""

    calls: list[tuple[str, float | None]] = field(default_factory=list)

    async def ack(self) -> None:
        self.calls.append(("ack", None))

    async def term(self) -> None:
        self.calls.append(("term", None))

    async def nak(self, delay: float | None = None) -> None:
        self.calls.append(("nak", delay))


@pytest.mark.parametrize(
    ("settlement", "expected"),
    [
        (ACK, [("ack", None)]),
        (TERM, [("term", None)]),
        (LEAVE, []),
        (
            retry(Backoff(1.0, 1.0), 1, Overloaded(ReasonCode.INTERNAL, retry_after=3.0)),
            [("nak", 3.0)],
        ),
    ],
)
async def test_settle_applies_exactly_one_action(settlement, expected) -> None:  # type: ignore[no-untyped-def]
    message = _Message()
    await settle(message, settlement)  # type: ignore[arg-type]
    assert message.calls == expected


def test_who_may_produce_each_subject_follows_the_pipeline() -> None:
    assert allowed_producers("quire.work.validate.interactive") == {"admission", "audit"}
    assert allowed_producers("quire.work.assemble.batch") == {"validator", "audit"}
    assert allowed_producers("quire.work.sign.interactive") == {"assembler", "audit"}
    assert allowed_producers("quire.work.commit.interactive") == {"signer", "audit"}
    assert allowed_producers("quire.dead.sign") == {"signer", "audit"}
    assert allowed_producers("quire.dead.commit") == frozenset()
    assert allowed_producers("quire.work.render.interactive") == frozenset()


def test_each_stage_service_may_publish_only_its_own_hand_off() -> None:
    for each in QUEUED_STAGES:
        allowed = SERVICE_PERMISSIONS[each.service].publish
        assert f"quire.work.{each.next}.*" in allowed
        assert f"quire.events.{each.service}" in allowed
        assert f"quire.dead.{each.name}" in allowed
        others = {s.name for s in STAGES} - {each.next}
        assert not any(f"quire.work.{other}." in subject for other in others for subject in allowed)
    assert "quire.work.validate.*" in SERVICE_PERMISSIONS["admission"].publish
