"""A task may only name blobs of its own job and tenant.

A genuine signature says which service produced a task; this check says the
task is about what it claims to be about: every source key is the tenant's
own copy of that digest, the assembled packet is the tenant's, and the signed
artifact is the one kept for this job. A task that names anything else —
another tenant's source, say — is refused before any stage reads a byte.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from quire.blobstore import assembled_key, signed_key, source_key
from quire.errors import QuireError
from quire.jobs import job_id
from quire.type import queue_pb2
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
        if source.blob_key != source_key(task.tenant, source.sha256):
            raise ForgedMessage("source outside the job's tenant")
    if task.HasField("assembled") and task.assembled.blob_key != assembled_key(
        task.tenant, task.assembled.sha256
    ):
        raise ForgedMessage("assembled packet outside the job's tenant")
    if task.HasField("signed") and task.signed.blob_key != signed_key(task.tenant, task.job):
        raise ForgedMessage("signed artifact not the job's own")
