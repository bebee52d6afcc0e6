"""NATS JetStream work queues: topology, publishing and the worker loop."""

from quire.workqueue.publisher import Publisher
from quire.workqueue.topology import (
    EVENTS_STREAM,
    PRIORITIES,
    WORK_STREAM,
    consumer_name,
    dead_subject,
    ensure_topology,
    event_batch_subject,
    event_subject,
    is_event_batch,
    redriven,
    task_message_id,
    task_subject,
    work_subject,
)
from quire.workqueue.worker import WorkQueueWorker

__all__ = [
    "EVENTS_STREAM",
    "PRIORITIES",
    "WORK_STREAM",
    "Publisher",
    "WorkQueueWorker",
    "consumer_name",
    "dead_subject",
    "ensure_topology",
    "event_batch_subject",
    "event_subject",
    "is_event_batch",
    "redriven",
    "task_message_id",
    "task_subject",
    "work_subject",
]
