"""Routing by track (issue 20): which queues a worker binds by its stage's
rollout, which subject a task goes to, and a worker rebinding while it runs."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import JetStreamContext

from quire.admission.rollouts.records import candidate_ruleset
from quire.rolloutboard import CANARY, PROMOTED, ROLLED_BACK, StageRollout
from quire.settings import QueueSettings
from quire.tracks import BASELINE, CANDIDATE
from quire.type import queue_pb2
from quire.workqueue import WORK_STREAM, WorkQueueWorker, consumer_name, ensure_topology
from quire.workqueue.routing import binding
from quire.workqueue.topology import (
    candidate_consumer_name,
    candidate_subject,
    task_subject,
    work_subject,
)

BASE = frozenset({"validate-interactive", "validate-batch"})
BOTH = BASE | {"validate-candidate"}
CAND = frozenset({"validate-candidate"})


def _rollout(state: str, version: str = "2.0") -> StageRollout:
    return StageRollout("validate", "rollouts/r", state, candidate_version=version)


@pytest.mark.parametrize(
    ("rollout", "version", "consumers", "track"),
    [
        (None, "1.0", BASE, BASELINE),
        (_rollout(CANARY), "1.0", BASE, BASELINE),
        (_rollout(CANARY), "2.0", CAND, CANDIDATE),
        (_rollout(CANARY, version=""), "1.0", BOTH, BASELINE),  # ruleset only
        (_rollout(ROLLED_BACK), "1.0", BOTH, BASELINE),
        (_rollout(ROLLED_BACK), "2.0", frozenset(), CANDIDATE),
        (_rollout(PROMOTED), "1.0", BOTH, BASELINE),
        (_rollout(PROMOTED), "2.0", BOTH, BASELINE),
    ],
)
def test_a_worker_binds_by_its_stages_rollout_and_its_version(
    rollout: StageRollout | None, version: str, consumers: frozenset[str], track: str
) -> None:
    assert binding("validate", version, rollout).consumers == consumers
    assert binding("validate", version, rollout).track == track


def test_a_task_goes_to_the_candidate_subject_only_for_its_rollouts_stages() -> None:
    task = queue_pb2.JobTask(job="jobs/a", priority="batch", track=CANDIDATE)
    task.candidate_stages.append("validate")
    assert task_subject("validate", task) == "quire.work.validate.batch.candidate"
    assert task_subject("assemble", task) == work_subject("assemble", "batch")
    task.track = BASELINE
    assert task_subject("validate", task) == work_subject("validate", "batch")
    plain = queue_pb2.JobTask(job="jobs/b")
    assert task_subject("sign", plain) == "quire.work.sign.interactive"


def test_the_candidate_ruleset_replaces_only_a_ruleset_of_its_name() -> None:
    class Open:
        candidate_ruleset = "default@2"

    assert candidate_ruleset("default@1", [Open()]) == "default@2"  # type: ignore[list-item]
    assert candidate_ruleset("lease-renewal@1", [Open()]) == ""  # type: ignore[list-item]
    assert candidate_ruleset("default@1", []) == ""


async def test_a_running_worker_rebinds_to_the_candidate_consumer(
    jetstream: JetStreamContext,
) -> None:
    await ensure_topology(jetstream, QueueSettings())
    done: list[str] = []

    async def handler(msg) -> None:  # type: ignore[no-untyped-def]
        done.append(msg.subject)
        await msg.ack()

    interactive = consumer_name("validate", "interactive")
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={interactive: 2},
        shared={candidate_consumer_name("validate"): interactive},
        handler=handler,
        ack_wait_seconds=5,
        fetch_timeout_seconds=0.3,
    )
    worker.bind({interactive})
    worker.start()
    await jetstream.publish(candidate_subject("validate", "interactive"), b"c")
    await jetstream.publish(work_subject("validate", "interactive"), b"b")
    for _ in range(100):
        if done:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert done == [work_subject("validate", "interactive")]  # the candidate's waits
    worker.bind({candidate_consumer_name("validate")})
    for _ in range(100):
        if len(done) == 2:
            break
        await asyncio.sleep(0.05)
    await worker.drain()
    assert done[1] == candidate_subject("validate", "interactive")
    with pytest.raises(ValueError, match="not this worker's"):
        worker.bind({"sign-interactive"})


async def test_the_queue_age_probe_reads_each_track_on_its_own(
    jetstream: JetStreamContext,
) -> None:
    """A candidate job held back by its cap is in line on the candidate
    consumer: the reconciler reads that queue's age for it (``candidate``),
    while shedding reads the baseline's, which the candidate's backlog does
    not age."""
    from quire.workqueue.backlog import QueueAgeProbe

    await ensure_topology(jetstream, QueueSettings())
    probe = QueueAgeProbe(jetstream, cache_seconds=0.0, stage="validate")
    assert await probe.oldest_ready_age("interactive", candidate=True) == 0.0
    await jetstream.publish(candidate_subject("validate", "interactive"), b"held")
    await asyncio.sleep(1.2)
    await jetstream.publish(work_subject("validate", "interactive"), b"fresh")
    candidate = await probe.oldest_ready_age("interactive", candidate=True)
    baseline = await probe.oldest_ready_age("interactive")
    assert candidate >= 1.0, candidate
    assert baseline < 1.0, baseline
    assert await probe.oldest_ready_age("batch", candidate=True) == 0.0


async def test_the_stage_gauges_show_the_candidate_tracks_backlog(
    jetstream: JetStreamContext,
) -> None:
    from quire.metrics import ServiceMetrics
    from quire.workqueue.backlog import QueueGauges

    await ensure_topology(jetstream, QueueSettings())
    metrics = ServiceMetrics("validator")
    gauges = QueueGauges(jetstream, "validate", metrics, budget_seconds=30)
    await jetstream.publish(candidate_subject("validate", "batch"), b"held")
    await jetstream.publish(candidate_subject("validate", "interactive"), b"held")
    await asyncio.sleep(1.1)
    await gauges.sample()
    read = metrics.registry.get_sample_value
    assert read("quire_queue_candidate_pending_messages", {"stage": "validate"}) == 2
    for priority in ("interactive", "batch"):
        age = read(
            "quire_queue_candidate_oldest_ready_age_seconds",
            {"stage": "validate", "class": priority},
        )
        assert age is not None and age >= 1.0
        baseline = read("quire_queue_pending_messages", {"stage": "validate", "class": priority})
        assert baseline == 0
