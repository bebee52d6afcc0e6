"""A task may name only its own job's and tenant's blobs (and carry only its
own job's events); a source named by reference names none until the
validator pinned it, then only the pinned bytes under ``fetched/``."""

from __future__ import annotations

import pytest

from quire.blobstore import fetched_key, source_key
from quire.jobs import job_name, new_job_id
from quire.taskbinding import check_task_binding
from quire.type import job_pb2, queue_pb2
from quire.wire import ForgedMessage

TENANT = "t-1"
DIGEST = "a" * 64


def _task(*sources: job_pb2.SourceRef) -> queue_pb2.JobTask:
    return queue_pb2.JobTask(job=job_name(new_job_id()), tenant=TENANT, sources=sources)


def _referenced(**fields: object) -> job_pb2.SourceRef:
    source = job_pb2.SourceRef(position=0, **fields)  # type: ignore[arg-type]
    source.fetch.CopyFrom(job_pb2.SourceFetch(system="tax", key="k"))
    return source


def _pinned(
    sha256: str = DIGEST, key: str | None = None, pin_sha256: str = DIGEST
) -> job_pb2.SourceRef:
    source = _referenced(
        sha256=sha256, blob_key=key if key is not None else fetched_key(TENANT, sha256)
    )
    source.pin.CopyFrom(job_pb2.SourcePin(position=0, sha256=pin_sha256))
    return source


def test_an_upload_and_a_pinned_or_unpinned_reference_are_bound() -> None:
    upload = job_pb2.SourceRef(position=1, sha256=DIGEST, blob_key=source_key(TENANT, DIGEST))
    check_task_binding(_task(_referenced(), upload))
    check_task_binding(_task(_pinned(), upload))


@pytest.mark.parametrize(
    "source",
    [
        job_pb2.SourceRef(sha256=DIGEST, blob_key=source_key("other", DIGEST)),
        _referenced(sha256=DIGEST, blob_key=fetched_key(TENANT, DIGEST)),  # no pin
        _referenced(blob_key=source_key(TENANT, DIGEST)),  # unpinned, yet names a blob
        _pinned(key=source_key(TENANT, DIGEST)),  # pinned bytes are never an upload's
        _pinned(key=fetched_key("other", DIGEST)),
        _pinned(pin_sha256="b" * 64),  # the pin and the source disagree
    ],
    ids=[
        "other-tenant",
        "digest-without-pin",
        "unpinned-blob",
        "upload-key",
        "other-fetched",
        "pin-disagrees",
    ],
)
def test_a_source_outside_its_binding_is_refused(source: job_pb2.SourceRef) -> None:
    with pytest.raises(ForgedMessage):
        check_task_binding(_task(source))


def test_a_task_may_carry_events_only_of_its_own_job_and_tenant() -> None:
    task = _task()
    own = queue_pb2.TransitionEvent(event_id="e1", job=task.job, tenant=TENANT)
    task.events.append(own)
    check_task_binding(task)
    for other in (
        queue_pb2.TransitionEvent(event_id="e2", job=job_name(new_job_id()), tenant=TENANT),
        queue_pb2.TransitionEvent(event_id="e3", job=task.job, tenant="other"),
    ):
        carrying = queue_pb2.JobTask()
        carrying.CopyFrom(task)
        carrying.events.append(other)
        with pytest.raises(ForgedMessage):
            check_task_binding(carrying)
