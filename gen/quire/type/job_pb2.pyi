import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_ACCEPTED: _ClassVar[JobState]
    JOB_STATE_VALIDATING: _ClassVar[JobState]
    JOB_STATE_REVIEWING: _ClassVar[JobState]
    JOB_STATE_NEEDS_REVIEW: _ClassVar[JobState]
    JOB_STATE_ASSEMBLING: _ClassVar[JobState]
    JOB_STATE_SIGNING: _ClassVar[JobState]
    JOB_STATE_COMMITTING: _ClassVar[JobState]
    JOB_STATE_COMPLETED: _ClassVar[JobState]
    JOB_STATE_REJECTED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_ACCEPTED: JobState
JOB_STATE_VALIDATING: JobState
JOB_STATE_REVIEWING: JobState
JOB_STATE_NEEDS_REVIEW: JobState
JOB_STATE_ASSEMBLING: JobState
JOB_STATE_SIGNING: JobState
JOB_STATE_COMMITTING: JobState
JOB_STATE_COMPLETED: JobState
JOB_STATE_REJECTED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState

class ManifestItem(_message.Message):
    __slots__ = ("position", "document_id", "sha256", "source")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    position: int
    document_id: str
    sha256: str
    source: SourceReference
    def __init__(self, position: _Optional[int] = ..., document_id: _Optional[str] = ..., sha256: _Optional[str] = ..., source: _Optional[_Union[SourceReference, _Mapping]] = ...) -> None: ...

class SourceReference(_message.Message):
    __slots__ = ("system", "key", "content_type")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    system: str
    key: str
    content_type: str
    def __init__(self, system: _Optional[str] = ..., key: _Optional[str] = ..., content_type: _Optional[str] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("items", "ruleset", "render_profile")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    RULESET_FIELD_NUMBER: _ClassVar[int]
    RENDER_PROFILE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ManifestItem]
    ruleset: str
    render_profile: str
    def __init__(self, items: _Optional[_Iterable[_Union[ManifestItem, _Mapping]]] = ..., ruleset: _Optional[str] = ..., render_profile: _Optional[str] = ...) -> None: ...

class SourceRef(_message.Message):
    __slots__ = ("position", "document_id", "sha256", "content_type", "size_bytes", "blob_key", "repair", "fetch", "pin")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    REPAIR_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    position: int
    document_id: str
    sha256: str
    content_type: str
    size_bytes: int
    blob_key: str
    repair: SourceRepair
    fetch: SourceFetch
    pin: SourcePin
    def __init__(self, position: _Optional[int] = ..., document_id: _Optional[str] = ..., sha256: _Optional[str] = ..., content_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., blob_key: _Optional[str] = ..., repair: _Optional[_Union[SourceRepair, _Mapping]] = ..., fetch: _Optional[_Union[SourceFetch, _Mapping]] = ..., pin: _Optional[_Union[SourcePin, _Mapping]] = ...) -> None: ...

class SourceFetch(_message.Message):
    __slots__ = ("system", "key", "content_type", "base_url", "credential_ref", "timeout", "max_bytes", "schema")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_REF_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    system: str
    key: str
    content_type: str
    base_url: str
    credential_ref: str
    timeout: _duration_pb2.Duration
    max_bytes: int
    schema: str
    def __init__(self, system: _Optional[str] = ..., key: _Optional[str] = ..., content_type: _Optional[str] = ..., base_url: _Optional[str] = ..., credential_ref: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_bytes: _Optional[int] = ..., schema: _Optional[str] = ...) -> None: ...

class SourcePin(_message.Message):
    __slots__ = ("position", "system", "key", "sha256", "size_bytes", "fetched_sha256", "schema_version", "fetch_time", "normalisations")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FETCHED_SHA256_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    FETCH_TIME_FIELD_NUMBER: _ClassVar[int]
    NORMALISATIONS_FIELD_NUMBER: _ClassVar[int]
    position: int
    system: str
    key: str
    sha256: str
    size_bytes: int
    fetched_sha256: str
    schema_version: str
    fetch_time: _timestamp_pb2.Timestamp
    normalisations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, position: _Optional[int] = ..., system: _Optional[str] = ..., key: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., fetched_sha256: _Optional[str] = ..., schema_version: _Optional[str] = ..., fetch_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., normalisations: _Optional[_Iterable[str]] = ...) -> None: ...

class SourceRepair(_message.Message):
    __slots__ = ("position", "sha256", "normalized_sha256", "normalized_size_bytes", "warnings")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_SHA256_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    position: int
    sha256: str
    normalized_sha256: str
    normalized_size_bytes: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, position: _Optional[int] = ..., sha256: _Optional[str] = ..., normalized_sha256: _Optional[str] = ..., normalized_size_bytes: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class PageDisagreement(_message.Message):
    __slots__ = ("position", "pages", "detail")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    position: int
    pages: _containers.RepeatedScalarFieldContainer[int]
    detail: str
    def __init__(self, position: _Optional[int] = ..., pages: _Optional[_Iterable[int]] = ..., detail: _Optional[str] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("blob_key", "sha256", "size_bytes", "page_count")
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    blob_key: str
    sha256: str
    size_bytes: int
    page_count: int
    def __init__(self, blob_key: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., page_count: _Optional[int] = ...) -> None: ...

class SigningRecord(_message.Message):
    __slots__ = ("key_version", "certificate_sha256", "signer_identity", "level")
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_SHA256_FIELD_NUMBER: _ClassVar[int]
    SIGNER_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    key_version: str
    certificate_sha256: str
    signer_identity: str
    level: str
    def __init__(self, key_version: _Optional[str] = ..., certificate_sha256: _Optional[str] = ..., signer_identity: _Optional[str] = ..., level: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("name", "state", "reason_code", "item_count", "manifest_digest", "output_digest", "ruleset_version", "create_time", "update_time", "key_version", "reason_detail", "bundle_id", "batch", "timings", "deadline", "pins", "source_waits", "track", "deliveries", "attempt", "tenant")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RULESET_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_DETAIL_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PINS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_WAITS_FIELD_NUMBER: _ClassVar[int]
    TRACK_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: JobState
    reason_code: str
    item_count: int
    manifest_digest: str
    output_digest: str
    ruleset_version: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    key_version: str
    reason_detail: str
    bundle_id: str
    batch: str
    timings: _containers.RepeatedCompositeFieldContainer[PhaseTiming]
    deadline: _timestamp_pb2.Timestamp
    pins: _containers.RepeatedCompositeFieldContainer[SourcePin]
    source_waits: _containers.RepeatedCompositeFieldContainer[SourceWait]
    track: str
    deliveries: int
    attempt: int
    tenant: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., reason_code: _Optional[str] = ..., item_count: _Optional[int] = ..., manifest_digest: _Optional[str] = ..., output_digest: _Optional[str] = ..., ruleset_version: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., key_version: _Optional[str] = ..., reason_detail: _Optional[str] = ..., bundle_id: _Optional[str] = ..., batch: _Optional[str] = ..., timings: _Optional[_Iterable[_Union[PhaseTiming, _Mapping]]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pins: _Optional[_Iterable[_Union[SourcePin, _Mapping]]] = ..., source_waits: _Optional[_Iterable[_Union[SourceWait, _Mapping]]] = ..., track: _Optional[str] = ..., deliveries: _Optional[int] = ..., attempt: _Optional[int] = ..., tenant: _Optional[str] = ...) -> None: ...

class SourceWait(_message.Message):
    __slots__ = ("system", "breaker", "retry_time", "reason_code", "since")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    RETRY_TIME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    system: str
    breaker: str
    retry_time: _timestamp_pb2.Timestamp
    reason_code: str
    since: _timestamp_pb2.Timestamp
    def __init__(self, system: _Optional[str] = ..., breaker: _Optional[str] = ..., retry_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason_code: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PhaseTiming(_message.Message):
    __slots__ = ("stage", "phase", "duration", "source_system")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    stage: str
    phase: str
    duration: _duration_pb2.Duration
    source_system: str
    def __init__(self, stage: _Optional[str] = ..., phase: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., source_system: _Optional[str] = ...) -> None: ...
