"""A task may only name blobs (and carry events) of its own job and tenant.

A genuine signature says which service produced a task; this check says the
task is about what it claims to be about: every source key is the tenant's
own copy of that digest, the assembled packet is the tenant's, and the signed
artifact is the one kept for this job. A task that names anything else —
another tenant's source, say — is refused before any stage reads a byte.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from quire.blobstore import assembled_key, fetched_key, signed_key, source_key
from quire.errors import QuireError
from quire.jobs import job_id
from quire.type import job_pb2, queue_pb2
from quire.wire import ForgedMessage

__all__ = ["check_task_binding", "read_task"]


def read_task(data: bytes) -> tuple[queue_pb2.JobTask, str]:
    """A received task and its job id; :class:`ForgedMessage` if it is not a
    well-formed task about its own job's and tenant's blobs."""
    try:
        task = queue_pb2.JobTask.FromString(data)
        ident = job_id(task.job)
    except (DecodeError, QuireError):
        raise ForgedMessage("undecodable task") from None
    check_task_binding(task)
    return task, ident


def check_task_binding(task: queue_pb2.JobTask) -> None:
    """Raise :class:`ForgedMessage` unless every blob the task names is its own."""
    if not task.tenant or not task.job:
        raise ForgedMessage("task names no job or tenant")
    for source in task.sources:
        if source.blob_key != _source_blob(task.tenant, source):
            raise ForgedMessage("source outside the job's tenant")
    if task.HasField("assembled") and task.assembled.blob_key != assembled_key(
        task.tenant, task.assembled.sha256
    ):
        raise ForgedMessage("assembled packet outside the job's tenant")
    if task.HasField("signed") and task.signed.blob_key != signed_key(task.tenant, task.job):
        raise ForgedMessage("signed artifact not the job's own")
    for event in task.events:
        if event.job != task.job or event.tenant != task.tenant:
            raise ForgedMessage("an event carried for another job")


def _source_blob(tenant: str, source: job_pb2.SourceRef) -> str:
    """The one blob key ``source`` may name: an upload's copy of its digest;
    for a source named by reference, nothing until the validator pinned it,
    then the pinned bytes (whose digest the pin and the source agree on)."""
    if not source.HasField("fetch"):
        return source_key(tenant, source.sha256)
    if not source.HasField("pin"):
        return "" if not source.sha256 else "\0unpinned"  # a digest with no pin: refused
    if source.pin.sha256 != source.sha256 or source.pin.position != source.position:
        return "\0mispinned"
    return fetched_key(tenant, source.sha256)
