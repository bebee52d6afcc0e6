"""Each stage's work queue as admission reads it to shed load, for operators
(TenantAdminService's ListQueues).

The readings are those of ``quire.workqueue.backlog``, which admission's
intake and batch dispatcher refuse work by: per stage, the messages not yet
delivered to its workers (both priority classes together) and the age of
the oldest; for every stage a rollout can canary, its candidate track's
queue too (its own consumer). Counts and ages only, never a message.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf import duration_pb2
from nats.js import JetStreamContext

from quire.admission.v1 import tenant_admin_service_pb2 as pb
from quire.pipeline import QUEUED_STAGE_NAMES, STAGE_NAMES
from quire.workqueue.backlog import QueueAgeProbe

__all__ = ["QueueReadings"]


def _reading(stage: str, ready: int, age: float, *, candidate: bool) -> pb.QueueReading:
    reading = pb.QueueReading(stage=stage, ready=ready, candidate=candidate)
    if ready and age > 0:
        oldest = duration_pb2.Duration()
        oldest.FromNanoseconds(int(age * 1e9))
        reading.oldest_age.CopyFrom(oldest)
    return reading


class QueueReadings:
    """Reads every stage's queue, in pipeline order, each stage's candidate
    track after it."""

    def __init__(self, probes: Mapping[str, QueueAgeProbe]) -> None:
        self._probes = probes
        """One probe per stage name (``quire.pipeline.STAGE_NAMES``)."""

    @classmethod
    def of(cls, js: JetStreamContext, *, cache_seconds: float = 1.0) -> QueueReadings:
        """A probe per stage on ``js``, a reading reused for ``cache_seconds``."""
        return cls(
            {
                stage: QueueAgeProbe(js, cache_seconds=cache_seconds, stage=stage)
                for stage in STAGE_NAMES
            }
        )

    async def read(self) -> pb.ListQueuesResponse:
        readings: list[pb.QueueReading] = []
        for stage in STAGE_NAMES:
            probe = self._probes[stage]
            ready, age = await probe.ready()
            readings.append(_reading(stage, ready, age, candidate=False))
            if stage in QUEUED_STAGE_NAMES:
                ready, age = await probe.ready(candidate=True)
                readings.append(_reading(stage, ready, age, candidate=True))
        return pb.ListQueuesResponse(queues=readings)
