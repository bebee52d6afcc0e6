import datetime

from quire.type import job_pb2 as _job_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quire.type import queue_pb2 as _queue_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecordRulesetChangeRequest(_message.Message):
    __slots__ = ("change", "change_time", "actor")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    CHANGE_TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    change: _queue_pb2.RulesetChange
    change_time: _timestamp_pb2.Timestamp
    actor: _queue_pb2.Actor
    def __init__(self, change: _Optional[_Union[_queue_pb2.RulesetChange, _Mapping]] = ..., change_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[_Union[_queue_pb2.Actor, _Mapping]] = ...) -> None: ...

class RecordRulesetChangeResponse(_message.Message):
    __slots__ = ("event_id", "appended")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    appended: bool
    def __init__(self, event_id: _Optional[str] = ..., appended: _Optional[bool] = ...) -> None: ...

class CompareTracksRequest(_message.Message):
    __slots__ = ("start_time", "end_time", "stage", "sample_size")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    stage: str
    sample_size: int
    def __init__(self, start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stage: _Optional[str] = ..., sample_size: _Optional[int] = ...) -> None: ...

class TrackSummary(_message.Message):
    __slots__ = ("track", "jobs", "endings", "reasons", "latency_p50_seconds", "latency_p95_seconds", "latency_p99_seconds", "steps", "retried_steps", "dead_letters", "versions", "completed_sample")
    class EndingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TRACK_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ENDINGS_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P50_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P99_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    RETRIED_STEPS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    track: str
    jobs: int
    endings: _containers.ScalarMap[str, int]
    reasons: _containers.ScalarMap[str, int]
    latency_p50_seconds: float
    latency_p95_seconds: float
    latency_p99_seconds: float
    steps: int
    retried_steps: int
    dead_letters: int
    versions: _containers.ScalarMap[str, int]
    completed_sample: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, track: _Optional[str] = ..., jobs: _Optional[int] = ..., endings: _Optional[_Mapping[str, int]] = ..., reasons: _Optional[_Mapping[str, int]] = ..., latency_p50_seconds: _Optional[float] = ..., latency_p95_seconds: _Optional[float] = ..., latency_p99_seconds: _Optional[float] = ..., steps: _Optional[int] = ..., retried_steps: _Optional[int] = ..., dead_letters: _Optional[int] = ..., versions: _Optional[_Mapping[str, int]] = ..., completed_sample: _Optional[_Iterable[str]] = ...) -> None: ...

class CompareTracksResponse(_message.Message):
    __slots__ = ("tracks",)
    TRACKS_FIELD_NUMBER: _ClassVar[int]
    tracks: _containers.RepeatedCompositeFieldContainer[TrackSummary]
    def __init__(self, tracks: _Optional[_Iterable[_Union[TrackSummary, _Mapping]]] = ...) -> None: ...

class RecordRetirementRequest(_message.Message):
    __slots__ = ("tenant", "job", "retirement")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    RETIREMENT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    job: str
    retirement: _queue_pb2.Retirement
    def __init__(self, tenant: _Optional[str] = ..., job: _Optional[str] = ..., retirement: _Optional[_Union[_queue_pb2.Retirement, _Mapping]] = ...) -> None: ...

class RecordRetirementResponse(_message.Message):
    __slots__ = ("event_id", "appended")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    appended: bool
    def __init__(self, event_id: _Optional[str] = ..., appended: _Optional[bool] = ...) -> None: ...

class DeadLetterRecord(_message.Message):
    __slots__ = ("job", "tenant", "stage", "reason_code", "deliveries", "generation", "status", "create_time", "resolve_time", "resolved_by", "deadline")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    job: str
    tenant: str
    stage: str
    reason_code: str
    deliveries: int
    generation: int
    status: str
    create_time: _timestamp_pb2.Timestamp
    resolve_time: _timestamp_pb2.Timestamp
    resolved_by: str
    deadline: _timestamp_pb2.Timestamp
    def __init__(self, job: _Optional[str] = ..., tenant: _Optional[str] = ..., stage: _Optional[str] = ..., reason_code: _Optional[str] = ..., deliveries: _Optional[int] = ..., generation: _Optional[int] = ..., status: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolved_by: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("include_resolved", "page_size", "page_token")
    INCLUDE_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    include_resolved: bool
    page_size: int
    page_token: str
    def __init__(self, include_resolved: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetterRecord]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetterRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetryDeadLetterRequest(_message.Message):
    __slots__ = ("job", "request_id", "budget")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    job: str
    request_id: str
    budget: _duration_pb2.Duration
    def __init__(self, job: _Optional[str] = ..., request_id: _Optional[str] = ..., budget: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DiscardDeadLetterRequest(_message.Message):
    __slots__ = ("job", "request_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job: str
    request_id: str
    def __init__(self, job: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ExportEvidenceRequest(_message.Message):
    __slots__ = ("job", "tenant", "since_size")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_SIZE_FIELD_NUMBER: _ClassVar[int]
    job: str
    tenant: str
    since_size: int
    def __init__(self, job: _Optional[str] = ..., tenant: _Optional[str] = ..., since_size: _Optional[int] = ...) -> None: ...

class Evidence(_message.Message):
    __slots__ = ("job", "json")
    JOB_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    job: str
    json: str
    def __init__(self, job: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class GetCheckpointKeyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointKey(_message.Message):
    __slots__ = ("public_key_pem", "public_key_sha256")
    PUBLIC_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_SHA256_FIELD_NUMBER: _ClassVar[int]
    public_key_pem: str
    public_key_sha256: str
    def __init__(self, public_key_pem: _Optional[str] = ..., public_key_sha256: _Optional[str] = ...) -> None: ...

class VerifyLedgerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LedgerFinding(_message.Message):
    __slots__ = ("kind", "sequence", "tenant", "column", "job")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    kind: str
    sequence: int
    tenant: str
    column: str
    job: str
    def __init__(self, kind: _Optional[str] = ..., sequence: _Optional[int] = ..., tenant: _Optional[str] = ..., column: _Optional[str] = ..., job: _Optional[str] = ...) -> None: ...

class VerifyLedgerResponse(_message.Message):
    __slots__ = ("ok", "entries", "chains", "checkpoints_checked", "findings")
    OK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CHAINS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    entries: int
    chains: int
    checkpoints_checked: int
    findings: _containers.RepeatedCompositeFieldContainer[LedgerFinding]
    def __init__(self, ok: _Optional[bool] = ..., entries: _Optional[int] = ..., chains: _Optional[int] = ..., checkpoints_checked: _Optional[int] = ..., findings: _Optional[_Iterable[_Union[LedgerFinding, _Mapping]]] = ...) -> None: ...

class BatchGetJobsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchGetJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ...) -> None: ...

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

class FollowJobsRequest(_message.Message):
    __slots__ = ("follow", "unfollow")
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    UNFOLLOW_FIELD_NUMBER: _ClassVar[int]
    follow: _containers.RepeatedCompositeFieldContainer[FollowedJob]
    unfollow: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, follow: _Optional[_Iterable[_Union[FollowedJob, _Mapping]]] = ..., unfollow: _Optional[_Iterable[int]] = ...) -> None: ...

class FollowedJob(_message.Message):
    __slots__ = ("id", "name", "after_sequence", "settled_only")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SETTLED_ONLY_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    after_sequence: int
    settled_only: bool
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., after_sequence: _Optional[int] = ..., settled_only: _Optional[bool] = ...) -> None: ...

class FollowJobsResponse(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[FollowedChange]
    def __init__(self, changes: _Optional[_Iterable[_Union[FollowedChange, _Mapping]]] = ...) -> None: ...

class FollowedChange(_message.Message):
    __slots__ = ("id", "change", "ended", "code", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: int
    change: WatchJobResponse
    ended: bool
    code: int
    reason: str
    def __init__(self, id: _Optional[int] = ..., change: _Optional[_Union[WatchJobResponse, _Mapping]] = ..., ended: _Optional[bool] = ..., code: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ListJobEventsRequest(_message.Message):
    __slots__ = ("job", "page_size", "page_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    page_size: int
    page_token: str
    def __init__(self, job: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class LedgerEntry(_message.Message):
    __slots__ = ("sequence", "event", "prev_hash", "entry_hash")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    event: _queue_pb2.TransitionEvent
    prev_hash: str
    entry_hash: str
    def __init__(self, sequence: _Optional[int] = ..., event: _Optional[_Union[_queue_pb2.TransitionEvent, _Mapping]] = ..., prev_hash: _Optional[str] = ..., entry_hash: _Optional[str] = ...) -> None: ...

class ListJobEventsResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LedgerEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[LedgerEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
