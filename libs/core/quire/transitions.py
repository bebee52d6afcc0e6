"""Transition events: built the same way by every stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import timestamp_pb2
from opentelemetry import trace

from quire.jobs import job_id, state_value
from quire.type import queue_pb2

__all__ = ["EventFactory", "current_trace_id", "event_id"]


def current_trace_id() -> str:
    """The current span's trace id as 32 hex digits; "" when there is no
    valid trace context (tracing off and nothing propagated)."""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else ""


def event_id(job: str, to_state: str, generation: int = 0) -> str:
    """One event per job, generation and target state: a republish or
    redelivery is a no-op, while a dead-letter retry (a new generation) records
    the job's second pass through the same states."""
    if generation:
        return f"{job_id(job)}.g{generation}.{to_state}"
    return f"{job_id(job)}.{to_state}"


@dataclass(frozen=True)
class EventFactory:
    """Stamps events with the acting service, instance and build."""

    service: str
    instance: str
    build_version: str

    def transition(
        self,
        task: queue_pb2.JobTask,
        from_state: str,
        to_state: str,
        *,
        attempt: int,
        lease_token: int,
        reason_code: str = "",
        **fields: Any,
    ) -> queue_pb2.TransitionEvent:
        occurred = timestamp_pb2.Timestamp()
        occurred.GetCurrentTime()
        event = queue_pb2.TransitionEvent(
            event_id=event_id(task.job, to_state, task.generation),
            generation=task.generation,
            job=task.job,
            tenant=task.tenant,
            from_state=state_value(from_state) if from_state else 0,  # type: ignore[arg-type]
            to_state=state_value(to_state),  # type: ignore[arg-type]
            actor=queue_pb2.Actor(
                service=self.service, instance=self.instance, build_version=self.build_version
            ),
            attempt=attempt,
            lease_token=lease_token,
            reason_code=reason_code,
            manifest_digest=task.manifest_digest,
            source_digests=[source.sha256 for source in task.sources],
            ruleset_version=task.ruleset,
            ruleset_digest=task.ruleset_digest,
            item_count=len(task.sources),
            occur_time=occurred,
            # The job's rollout track (quire.tracks), on every entry; "" for none.
            track=task.track,
            **fields,
        )
        if task.HasField("deadline"):
            event.deadline.CopyFrom(task.deadline)
        event.trace_id = current_trace_id()
        # What the validator pinned for sources named by reference: every later
        # entry carries it, as every entry carries the source digests.
        event.pins.extend(source.pin for source in task.sources if source.HasField("pin"))
        return event
