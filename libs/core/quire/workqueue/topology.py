"""Streams, subjects, durable consumers and the key-value buckets (the job
gates, and the workers' announcements).

They are created idempotently by whoever holds the right to: the embedded
stack with its operator credential, a cluster's provisioning job, or — only
on a NATS that has no authorization at all — each service at start. A service
with credentials cannot administer streams; it waits until they exist.

One work-queue stream holds ``quire.work.<stage>.<priority>``; each subject has
exactly one durable pull consumer (work-queue filters must not overlap). A
rollout's candidate track has subjects of its own,
``quire.work.<stage>.<priority>.candidate``, under one consumer per stage,
``<stage>-candidate``, whose ``max_ack_pending`` is the rollout's concurrency
cap (``quire.workqueue.routing``). One events stream holds
``quire.events.<service>``; audit consumes all of it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError

from quire.announcements import WORKERS_BUCKET
from quire.jobgate import GATE_BUCKET, gate_config
from quire.natsblobs import BLOB_BUCKET, ensure_blob_buckets
from quire.natskeyring import KEYRING_BUCKET
from quire.pipeline import QUEUED_STAGES, STAGES
from quire.rolloutboard import ROLLOUTS_BUCKET
from quire.settings import QueueSettings
from quire.streamsafety import ensure_safe_stream
from quire.tracks import CANDIDATE

__all__ = [
    "WORK_STREAM",
    "EVENTS_STREAM",
    "PRIORITIES",
    "EVENTS_CONSUMER",
    "CHECKPOINT_SUBJECT",
    "DEAD_STREAM",
    "DEAD_CONSUMER",
    "work_subject",
    "candidate_subject",
    "candidate_filter",
    "candidate_consumer_name",
    "task_subject",
    "CANDIDATE_DEFAULT_CAP",
    "event_subject",
    "event_batch_subject",
    "is_event_batch",
    "batch_message_id",
    "consumer_name",
    "task_message_id",
    "redriven",
    "dead_subject",
    "DEAD_BOOK_CONSUMER",
    "TOPOLOGY_STREAMS",
    "ensure_topology",
    "candidate_consumer_config",
    "priority_shares",
    "wait_for_topology",
]

WORK_STREAM = "QUIRE_WORK"
EVENTS_STREAM = "QUIRE_EVENTS"
PRIORITIES = ("interactive", "batch")
EVENTS_CONSUMER = "audit-events"
CHECKPOINT_SUBJECT = "quire.checkpoints.audit"
DEAD_STREAM = "QUIRE_DEAD"
DEAD_CONSUMER = "dead-letter-office"
DEAD_BOOK_CONSUMER = "dead-letter-book"
"""Audit's record of every dead letter (``quire.dead.<stage>``), for operators."""
MAX_DELIVERIES_ADVISORY = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{WORK_STREAM}.>"
"""JetStream's notice that a work message will not be delivered again; kept in
the dead-letter stream so none is missed while no listener runs."""
"""Signed ledger checkpoints, kept on the events stream beside (not among) events."""
EVENTS_MAX_AGE_SECONDS = 30 * 24 * 3600.0


TOPOLOGY_STREAMS = (
    WORK_STREAM,
    EVENTS_STREAM,
    DEAD_STREAM,
    f"KV_{GATE_BUCKET}",
    f"OBJ_{BLOB_BUCKET}",
    f"KV_{KEYRING_BUCKET}",
    f"KV_{WORKERS_BUCKET}",
    f"KV_{ROLLOUTS_BUCKET}",
)
"""Every stream and bucket provisioning makes, each with ``QueueSettings.replicas`` copies."""


def work_subject(stage: str, priority: str) -> str:
    return f"quire.work.{stage}.{priority}"


def candidate_subject(stage: str, priority: str) -> str:
    """Where a candidate-track job's task for ``stage`` waits while a rollout
    of ``stage`` routes it to the candidate's workers."""
    return f"{work_subject(stage, priority)}.{CANDIDATE}"


def candidate_filter(stage: str) -> str:
    """The candidate consumer's filter: both priorities' candidate subjects
    (disjoint from the baseline consumers' exact subjects)."""
    return f"quire.work.{stage}.*.{CANDIDATE}"


def candidate_consumer_name(stage: str) -> str:
    return f"{stage}-{CANDIDATE}"


CANDIDATE_DEFAULT_CAP = 1
"""A candidate consumer's ``max_ack_pending`` until a rollout sets its cap."""


def task_subject(stage: str, task: object) -> str:
    """The subject ``task`` (a ``JobTask``) is published on for ``stage``: the
    candidate subject when admission pinned the job to the candidate track of
    a rollout of ``stage`` (``JobTask.candidate_stages``), else the baseline's.
    A function of the task alone, so every publisher (a stage handing on,
    admission's dispatcher and re-drives, audit's retries) routes alike."""
    priority = getattr(task, "priority", "") or "interactive"
    if getattr(task, "track", "") == CANDIDATE and stage in getattr(task, "candidate_stages", ()):
        return candidate_subject(stage, priority)
    return work_subject(stage, priority)


def event_subject(service: str) -> str:
    return f"quire.events.{service}"


def event_batch_subject(service: str) -> str:
    """Where ``service`` publishes the events of one commit as one message
    (``EventBatch``); the subject, which the signature binds, says how to read it."""
    return f"quire.events.{service}.batch"


def is_event_batch(subject: str) -> bool:
    return subject.startswith("quire.events.") and subject.endswith(".batch")


def batch_message_id(events: Sequence[Any]) -> str:
    """``Nats-Msg-Id`` of an ``EventBatch``: from its events' ids, so the same
    events again are one message, and another selection of them another."""
    joined = "\n".join(event.event_id for event in events)
    return "batch:" + hashlib.sha256(joined.encode()).hexdigest()[:40]


def task_message_id(job: str, stage: str, generation: int = 0) -> str:
    """``Nats-Msg-Id`` of a job's task for a stage: a republish is dropped, while a
    dead-letter retry (a new generation) is a new message."""
    ident = job.removeprefix("jobs/")
    if generation:
        return f"{ident}.g{generation}.{stage}"
    return f"{ident}.{stage}"


def redriven(msg_id: str, redrive: int) -> str:
    """The ``Nats-Msg-Id`` of a message sent again by a re-drive: a fresh one, so
    JetStream's duplicate window does not swallow a copy whose original was lost."""
    return f"{msg_id}.r{redrive}" if redrive else msg_id


def dead_subject(stage: str) -> str:
    return f"quire.dead.{stage}"


def consumer_name(stage: str, priority: str) -> str:
    return f"{stage}-{priority}"


async def ensure_topology(js: JetStreamContext, queue: QueueSettings) -> None:
    """Create the streams and consumers if missing; safe to call from every process."""
    await _ensure_stream(
        js,
        api.StreamConfig(
            name=WORK_STREAM,
            subjects=["quire.work.>"],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE,
            duplicate_window=queue.duplicate_window_seconds,
            num_replicas=queue.replicas,
            # Deferred tasks wait as scheduled copies (quire.workqueue.deferral).
            allow_msg_schedules=True,
        ),
    )
    await _ensure_stream(
        js,
        api.StreamConfig(
            name=EVENTS_STREAM,
            subjects=["quire.events.>", "quire.checkpoints.>"],
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            duplicate_window=queue.duplicate_window_seconds,
            max_age=EVENTS_MAX_AGE_SECONDS,
            num_replicas=queue.replicas,
        ),
    )
    for stage in STAGES:
        shares = priority_shares(queue.stage_limit(stage.name))
        for priority in PRIORITIES:
            await js.add_consumer(
                WORK_STREAM,
                api.ConsumerConfig(
                    durable_name=consumer_name(stage.name, priority),
                    filter_subject=work_subject(stage.name, priority),
                    ack_policy=api.AckPolicy.EXPLICIT,
                    ack_wait=queue.ack_wait_seconds,
                    # Commit waits for lagging evidence without a delivery limit.
                    max_deliver=queue.max_deliver if stage.limited else -1,
                    # The stage's limit, across every replica: JetStream hands
                    # out no more unacknowledged messages than this.
                    max_ack_pending=shares[priority],
                ),
            )
    for stage in QUEUED_STAGES:
        await _ensure_candidate_consumer(js, queue, stage.name)
    await _ensure_stream(
        js,
        api.StreamConfig(
            name=DEAD_STREAM,
            subjects=["quire.dead.>", MAX_DELIVERIES_ADVISORY],
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            duplicate_window=queue.duplicate_window_seconds,
            num_replicas=queue.replicas,
        ),
    )
    await js.add_consumer(
        DEAD_STREAM,
        api.ConsumerConfig(
            durable_name=DEAD_CONSUMER,
            filter_subject=MAX_DELIVERIES_ADVISORY,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=queue.ack_wait_seconds,
            max_deliver=-1,
        ),
    )
    await js.add_consumer(
        DEAD_STREAM,
        api.ConsumerConfig(
            durable_name=DEAD_BOOK_CONSUMER,
            filter_subject="quire.dead.>",
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=queue.ack_wait_seconds,
            max_deliver=-1,
        ),
    )
    await js.add_consumer(
        EVENTS_STREAM,
        api.ConsumerConfig(
            durable_name=EVENTS_CONSUMER,
            filter_subject="quire.events.>",
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=queue.ack_wait_seconds,
            max_deliver=-1,
        ),
    )
    await ensure_safe_stream(
        js,
        gate_config(queue.replicas),
        (
            "allow_rollup_hdrs",
            "discard",
            "discard_new_per_subject",
            "max_msgs_per_subject",
            "max_age",
        ),
    )
    await ensure_blob_buckets(js, queue.replicas)
    await _ensure_workers_bucket(js, queue)
    await _ensure_plain_bucket(js, ROLLOUTS_BUCKET, queue.replicas)


async def _ensure_candidate_consumer(
    js: JetStreamContext, queue: QueueSettings, stage: str
) -> None:
    """The stage's candidate consumer, made once with the default cap: a
    rollout (admission's ``RolloutSync``) sets its cap, and provisioning again
    never resets it."""
    try:
        await js.consumer_info(WORK_STREAM, candidate_consumer_name(stage))
        return
    except Exception:  # noqa: BLE001 - NotFoundError: make it
        pass
    await js.add_consumer(
        WORK_STREAM, candidate_consumer_config(queue, stage, CANDIDATE_DEFAULT_CAP)
    )


def candidate_consumer_config(queue: QueueSettings, stage: str, cap: int) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=candidate_consumer_name(stage),
        filter_subject=candidate_filter(stage),
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=queue.ack_wait_seconds,
        max_deliver=queue.max_deliver,
        max_ack_pending=cap,
    )


def priority_shares(limit: int) -> dict[str, int]:
    """A stage's limit split between its two consumers, since JetStream caps
    each consumer on its own: batch work gets a third (at least one), as each
    process gives it half the slots interactive work has."""
    batch = max(1, limit // 3)
    return {"interactive": limit - batch, "batch": batch}


async def wait_for_topology(js: JetStreamContext, timeout: float = 120.0) -> None:
    """Return once the streams and the buckets exist (made by an operator)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            for stream in TOPOLOGY_STREAMS:
                await js.stream_info(stream)
            return
        except Exception:  # noqa: BLE001 - not provisioned yet, or NATS restarting
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _ensure_plain_bucket(js: JetStreamContext, bucket: str, replicas: int) -> None:
    """A key-value bucket keeping each key's latest value, no time-to-live:
    the job gates, and each stage's current rollout (``quire.rolloutboard``)."""
    try:
        await js.key_value(bucket)
    except BucketNotFoundError:
        try:
            await js.create_key_value(
                api.KeyValueConfig(
                    bucket=bucket, history=1, storage=api.StorageType.FILE, replicas=replicas
                )
            )
        except Exception:  # noqa: BLE001 - created concurrently
            await js.key_value(bucket)


async def _ensure_workers_bucket(js: JetStreamContext, queue: QueueSettings) -> None:
    """Announcements (``quire.announcements``): one entry per process, kept for
    a few heartbeats; an existing bucket takes the configured time-to-live."""
    ttl = queue.worker_ttl_seconds
    try:
        await js.key_value(WORKERS_BUCKET)
    except BucketNotFoundError:
        try:
            await js.create_key_value(
                api.KeyValueConfig(
                    bucket=WORKERS_BUCKET,
                    history=1,
                    ttl=ttl,
                    storage=api.StorageType.FILE,
                    replicas=queue.replicas,
                )
            )
            return
        except Exception:  # noqa: BLE001 - created concurrently
            await js.key_value(WORKERS_BUCKET)
    info = await js.stream_info(f"KV_{WORKERS_BUCKET}")
    if info.config.max_age != ttl:
        await js.update_stream(replace(info.config, max_age=ttl, duplicate_window=min(ttl, 120.0)))


async def _ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    try:
        await js.stream_info(config.name or "")
    except Exception:  # noqa: BLE001 - NotFoundError or a racing creator; add decides
        try:
            await js.add_stream(config)
            return
        except Exception:  # noqa: BLE001 - created concurrently by another service
            pass
    await js.update_stream(config)
