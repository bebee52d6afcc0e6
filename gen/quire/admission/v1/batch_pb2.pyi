import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quire.type import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BatchState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_STATE_UNSPECIFIED: _ClassVar[BatchState]
    BATCH_STATE_DISPATCHING: _ClassVar[BatchState]
    BATCH_STATE_FINISHING: _ClassVar[BatchState]
    BATCH_STATE_DONE: _ClassVar[BatchState]
    BATCH_STATE_CANCELLED: _ClassVar[BatchState]
BATCH_STATE_UNSPECIFIED: BatchState
BATCH_STATE_DISPATCHING: BatchState
BATCH_STATE_FINISHING: BatchState
BATCH_STATE_DONE: BatchState
BATCH_STATE_CANCELLED: BatchState

class BatchPacket(_message.Message):
    __slots__ = ("bundle_id", "manifest")
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    bundle_id: str
    manifest: _job_pb2.Manifest
    def __init__(self, bundle_id: _Optional[str] = ..., manifest: _Optional[_Union[_job_pb2.Manifest, _Mapping]] = ...) -> None: ...

class SubmitBatchRequest(_message.Message):
    __slots__ = ("request_id", "packets", "manifest_sha256")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PACKETS_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_SHA256_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    packets: _containers.RepeatedCompositeFieldContainer[BatchPacket]
    manifest_sha256: str
    def __init__(self, request_id: _Optional[str] = ..., packets: _Optional[_Iterable[_Union[BatchPacket, _Mapping]]] = ..., manifest_sha256: _Optional[str] = ...) -> None: ...

class BatchJobCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: _job_pb2.JobState
    count: int
    def __init__(self, state: _Optional[_Union[_job_pb2.JobState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("name", "state", "packet_count", "dispatched_count", "cancelled_undispatched_count", "job_counts", "terminal_count", "create_time", "update_time", "finish_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PACKET_COUNT_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_UNDISPATCHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    JOB_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: BatchState
    packet_count: int
    dispatched_count: int
    cancelled_undispatched_count: int
    job_counts: _containers.RepeatedCompositeFieldContainer[BatchJobCount]
    terminal_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[BatchState, str]] = ..., packet_count: _Optional[int] = ..., dispatched_count: _Optional[int] = ..., cancelled_undispatched_count: _Optional[int] = ..., job_counts: _Optional[_Iterable[_Union[BatchJobCount, _Mapping]]] = ..., terminal_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetBatchRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListBatchJobsRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class BatchJob(_message.Message):
    __slots__ = ("index", "bundle_id", "job", "state", "cancelled_undispatched", "reason_code")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_UNDISPATCHED_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    index: int
    bundle_id: str
    job: str
    state: _job_pb2.JobState
    cancelled_undispatched: bool
    reason_code: str
    def __init__(self, index: _Optional[int] = ..., bundle_id: _Optional[str] = ..., job: _Optional[str] = ..., state: _Optional[_Union[_job_pb2.JobState, str]] = ..., cancelled_undispatched: _Optional[bool] = ..., reason_code: _Optional[str] = ...) -> None: ...

class ListBatchJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[BatchJob]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[BatchJob, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelBatchRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelBatchResponse(_message.Message):
    __slots__ = ("batch", "not_dispatched_cancelled", "in_flight_finishing", "already_terminal")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NOT_DISPATCHED_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FINISHING_FIELD_NUMBER: _ClassVar[int]
    ALREADY_TERMINAL_FIELD_NUMBER: _ClassVar[int]
    batch: Batch
    not_dispatched_cancelled: int
    in_flight_finishing: int
    already_terminal: int
    def __init__(self, batch: _Optional[_Union[Batch, _Mapping]] = ..., not_dispatched_cancelled: _Optional[int] = ..., in_flight_finishing: _Optional[int] = ..., already_terminal: _Optional[int] = ...) -> None: ...
