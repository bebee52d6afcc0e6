import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quire.type import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobTask(_message.Message):
    __slots__ = ("job", "tenant", "manifest_digest", "sources", "ruleset", "render_profile", "priority", "assembled", "signed", "signing", "ruleset_digest", "generation", "redrive", "deadline", "track", "candidate_stages", "candidate_ruleset", "events")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    RULESET_FIELD_NUMBER: _ClassVar[int]
    RENDER_PROFILE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ASSEMBLED_FIELD_NUMBER: _ClassVar[int]
    SIGNED_FIELD_NUMBER: _ClassVar[int]
    SIGNING_FIELD_NUMBER: _ClassVar[int]
    RULESET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REDRIVE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TRACK_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_STAGES_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_RULESET_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    tenant: str
    manifest_digest: str
    sources: _containers.RepeatedCompositeFieldContainer[_job_pb2.SourceRef]
    ruleset: str
    render_profile: str
    priority: str
    assembled: _job_pb2.Artifact
    signed: _job_pb2.Artifact
    signing: _job_pb2.SigningRecord
    ruleset_digest: str
    generation: int
    redrive: int
    deadline: _timestamp_pb2.Timestamp
    track: str
    candidate_stages: _containers.RepeatedScalarFieldContainer[str]
    candidate_ruleset: str
    events: _containers.RepeatedCompositeFieldContainer[TransitionEvent]
    def __init__(self, job: _Optional[str] = ..., tenant: _Optional[str] = ..., manifest_digest: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[_job_pb2.SourceRef, _Mapping]]] = ..., ruleset: _Optional[str] = ..., render_profile: _Optional[str] = ..., priority: _Optional[str] = ..., assembled: _Optional[_Union[_job_pb2.Artifact, _Mapping]] = ..., signed: _Optional[_Union[_job_pb2.Artifact, _Mapping]] = ..., signing: _Optional[_Union[_job_pb2.SigningRecord, _Mapping]] = ..., ruleset_digest: _Optional[str] = ..., generation: _Optional[int] = ..., redrive: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., track: _Optional[str] = ..., candidate_stages: _Optional[_Iterable[str]] = ..., candidate_ruleset: _Optional[str] = ..., events: _Optional[_Iterable[_Union[TransitionEvent, _Mapping]]] = ...) -> None: ...

class Actor(_message.Message):
    __slots__ = ("service", "instance", "build_version")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    BUILD_VERSION_FIELD_NUMBER: _ClassVar[int]
    service: str
    instance: str
    build_version: str
    def __init__(self, service: _Optional[str] = ..., instance: _Optional[str] = ..., build_version: _Optional[str] = ...) -> None: ...

class TransitionEvent(_message.Message):
    __slots__ = ("event_id", "job", "tenant", "from_state", "to_state", "actor", "attempt", "lease_token", "reason_code", "manifest_digest", "source_digests", "output_digest", "ruleset_version", "key_version", "certificate_sha256", "occur_time", "item_count", "ruleset_digest", "note", "signer_identity", "signature_level", "generation", "retirement", "repairs", "reason_detail", "timings", "deadline", "pins", "track", "disagreements", "ruleset_change", "trace_id")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RULESET_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_SHA256_FIELD_NUMBER: _ClassVar[int]
    OCCUR_TIME_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    RULESET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SIGNER_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RETIREMENT_FIELD_NUMBER: _ClassVar[int]
    REPAIRS_FIELD_NUMBER: _ClassVar[int]
    REASON_DETAIL_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PINS_FIELD_NUMBER: _ClassVar[int]
    TRACK_FIELD_NUMBER: _ClassVar[int]
    DISAGREEMENTS_FIELD_NUMBER: _ClassVar[int]
    RULESET_CHANGE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    job: str
    tenant: str
    from_state: _job_pb2.JobState
    to_state: _job_pb2.JobState
    actor: Actor
    attempt: int
    lease_token: int
    reason_code: str
    manifest_digest: str
    source_digests: _containers.RepeatedScalarFieldContainer[str]
    output_digest: str
    ruleset_version: str
    key_version: str
    certificate_sha256: str
    occur_time: _timestamp_pb2.Timestamp
    item_count: int
    ruleset_digest: str
    note: str
    signer_identity: str
    signature_level: str
    generation: int
    retirement: Retirement
    repairs: _containers.RepeatedCompositeFieldContainer[_job_pb2.SourceRepair]
    reason_detail: str
    timings: _containers.RepeatedCompositeFieldContainer[_job_pb2.PhaseTiming]
    deadline: _timestamp_pb2.Timestamp
    pins: _containers.RepeatedCompositeFieldContainer[_job_pb2.SourcePin]
    track: str
    disagreements: _containers.RepeatedCompositeFieldContainer[_job_pb2.PageDisagreement]
    ruleset_change: RulesetChange
    trace_id: str
    def __init__(self, event_id: _Optional[str] = ..., job: _Optional[str] = ..., tenant: _Optional[str] = ..., from_state: _Optional[_Union[_job_pb2.JobState, str]] = ..., to_state: _Optional[_Union[_job_pb2.JobState, str]] = ..., actor: _Optional[_Union[Actor, _Mapping]] = ..., attempt: _Optional[int] = ..., lease_token: _Optional[int] = ..., reason_code: _Optional[str] = ..., manifest_digest: _Optional[str] = ..., source_digests: _Optional[_Iterable[str]] = ..., output_digest: _Optional[str] = ..., ruleset_version: _Optional[str] = ..., key_version: _Optional[str] = ..., certificate_sha256: _Optional[str] = ..., occur_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., item_count: _Optional[int] = ..., ruleset_digest: _Optional[str] = ..., note: _Optional[str] = ..., signer_identity: _Optional[str] = ..., signature_level: _Optional[str] = ..., generation: _Optional[int] = ..., retirement: _Optional[_Union[Retirement, _Mapping]] = ..., repairs: _Optional[_Iterable[_Union[_job_pb2.SourceRepair, _Mapping]]] = ..., reason_detail: _Optional[str] = ..., timings: _Optional[_Iterable[_Union[_job_pb2.PhaseTiming, _Mapping]]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pins: _Optional[_Iterable[_Union[_job_pb2.SourcePin, _Mapping]]] = ..., track: _Optional[str] = ..., disagreements: _Optional[_Iterable[_Union[_job_pb2.PageDisagreement, _Mapping]]] = ..., ruleset_change: _Optional[_Union[RulesetChange, _Mapping]] = ..., trace_id: _Optional[str] = ...) -> None: ...

class RulesetChange(_message.Message):
    __slots__ = ("name", "previous_version", "current_version", "cause", "rollout")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    name: str
    previous_version: str
    current_version: str
    cause: str
    rollout: str
    def __init__(self, name: _Optional[str] = ..., previous_version: _Optional[str] = ..., current_version: _Optional[str] = ..., cause: _Optional[str] = ..., rollout: _Optional[str] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[TransitionEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[TransitionEvent, _Mapping]]] = ...) -> None: ...

class Retirement(_message.Message):
    __slots__ = ("kind", "blob_key", "sha256", "size_bytes", "rule", "period_seconds", "period_start_time")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_START_TIME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    blob_key: str
    sha256: str
    size_bytes: int
    rule: str
    period_seconds: int
    period_start_time: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[str] = ..., blob_key: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., rule: _Optional[str] = ..., period_seconds: _Optional[int] = ..., period_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StageOutcome(_message.Message):
    __slots__ = ("events", "next_task", "next_subject", "dead_letter")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASK_FIELD_NUMBER: _ClassVar[int]
    NEXT_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[TransitionEvent]
    next_task: JobTask
    next_subject: str
    dead_letter: DeadLetter
    def __init__(self, events: _Optional[_Iterable[_Union[TransitionEvent, _Mapping]]] = ..., next_task: _Optional[_Union[JobTask, _Mapping]] = ..., next_subject: _Optional[str] = ..., dead_letter: _Optional[_Union[DeadLetter, _Mapping]] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("task", "stage", "reason_code", "deliveries")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    task: JobTask
    stage: str
    reason_code: str
    deliveries: int
    def __init__(self, task: _Optional[_Union[JobTask, _Mapping]] = ..., stage: _Optional[str] = ..., reason_code: _Optional[str] = ..., deliveries: _Optional[int] = ...) -> None: ...
