import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from quire.admission.v1 import batch_pb2 as _batch_pb2
from quire.admission.v1 import notification_pb2 as _notification_pb2
from quire.type import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SourceHeader(_message.Message):
    __slots__ = ("sha256", "size_bytes", "content_type")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size_bytes: int
    content_type: str
    def __init__(self, sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., content_type: _Optional[str] = ...) -> None: ...

class UploadSourceRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: SourceHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[SourceHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("name", "sha256", "size_bytes", "content_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: str
    size_bytes: int
    content_type: str
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., content_type: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("request_id", "manifest", "priority", "bundle_id", "budget", "inline_sources")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    INLINE_SOURCES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    manifest: _job_pb2.Manifest
    priority: str
    bundle_id: str
    budget: _duration_pb2.Duration
    inline_sources: _containers.RepeatedCompositeFieldContainer[InlineSource]
    def __init__(self, request_id: _Optional[str] = ..., manifest: _Optional[_Union[_job_pb2.Manifest, _Mapping]] = ..., priority: _Optional[str] = ..., bundle_id: _Optional[str] = ..., budget: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., inline_sources: _Optional[_Iterable[_Union[InlineSource, _Mapping]]] = ...) -> None: ...

class InlineSource(_message.Message):
    __slots__ = ("header", "content")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    header: SourceHeader
    content: bytes
    def __init__(self, header: _Optional[_Union[SourceHeader, _Mapping]] = ..., content: _Optional[bytes] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("name", "after_sequence", "settled_only")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SETTLED_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    after_sequence: int
    settled_only: bool
    def __init__(self, name: _Optional[str] = ..., after_sequence: _Optional[int] = ..., settled_only: _Optional[bool] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("job", "sequence")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    sequence: int
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., sequence: _Optional[int] = ...) -> None: ...

class DownloadArtifactRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DownloadArtifactResponse(_message.Message):
    __slots__ = ("chunk", "sha256", "size_bytes")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    sha256: str
    size_bytes: int
    def __init__(self, chunk: _Optional[bytes] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "state")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: _job_pb2.JobState
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[_Union[_job_pb2.JobState, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetJobEvidenceRequest(_message.Message):
    __slots__ = ("name", "since_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    since_size: int
    def __init__(self, name: _Optional[str] = ..., since_size: _Optional[int] = ...) -> None: ...

class JobEvidence(_message.Message):
    __slots__ = ("job", "json")
    JOB_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    job: str
    json: str
    def __init__(self, job: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...
