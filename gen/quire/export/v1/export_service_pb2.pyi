import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Collection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLLECTION_UNSPECIFIED: _ClassVar[Collection]
    COLLECTION_ACCEPTED_JOBS: _ClassVar[Collection]
    COLLECTION_UPLOADS: _ClassVar[Collection]
    COLLECTION_TENANT_PERIODS: _ClassVar[Collection]
    COLLECTION_LEDGER_ROWS: _ClassVar[Collection]
    COLLECTION_CHAIN_HEADS: _ClassVar[Collection]
    COLLECTION_JOB_INDEX: _ClassVar[Collection]
    COLLECTION_REFUSED_EVENTS: _ClassVar[Collection]
    COLLECTION_CHECKPOINT_FILES: _ClassVar[Collection]
    COLLECTION_CHECKPOINT_KEY: _ClassVar[Collection]
    COLLECTION_PACKETS: _ClassVar[Collection]
    COLLECTION_LEASE_OUTCOMES: _ClassVar[Collection]
    COLLECTION_SIGNATURES: _ClassVar[Collection]
    COLLECTION_SOURCE_PINS: _ClassVar[Collection]
COLLECTION_UNSPECIFIED: Collection
COLLECTION_ACCEPTED_JOBS: Collection
COLLECTION_UPLOADS: Collection
COLLECTION_TENANT_PERIODS: Collection
COLLECTION_LEDGER_ROWS: Collection
COLLECTION_CHAIN_HEADS: Collection
COLLECTION_JOB_INDEX: Collection
COLLECTION_REFUSED_EVENTS: Collection
COLLECTION_CHECKPOINT_FILES: Collection
COLLECTION_CHECKPOINT_KEY: Collection
COLLECTION_PACKETS: Collection
COLLECTION_LEASE_OUTCOMES: Collection
COLLECTION_SIGNATURES: Collection
COLLECTION_SOURCE_PINS: Collection

class ExportRecordsRequest(_message.Message):
    __slots__ = ("collection", "page_size", "page_token")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    collection: Collection
    page_size: int
    page_token: str
    def __init__(self, collection: _Optional[_Union[Collection, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ExportRecordsResponse(_message.Message):
    __slots__ = ("records", "next_page_token", "collection", "service", "sequence_gaps_are_deletions")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_GAPS_ARE_DELETIONS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    next_page_token: str
    collection: Collection
    service: str
    sequence_gaps_are_deletions: bool
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., collection: _Optional[_Union[Collection, str]] = ..., service: _Optional[str] = ..., sequence_gaps_are_deletions: _Optional[bool] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("accepted_job", "upload", "tenant_periods", "ledger_row", "chain_head", "job_index", "refused_event", "checkpoint_file", "checkpoint_key", "packet", "lease_outcome", "signature", "source_pin")
    ACCEPTED_JOB_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    TENANT_PERIODS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ROW_FIELD_NUMBER: _ClassVar[int]
    CHAIN_HEAD_FIELD_NUMBER: _ClassVar[int]
    JOB_INDEX_FIELD_NUMBER: _ClassVar[int]
    REFUSED_EVENT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FILE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_KEY_FIELD_NUMBER: _ClassVar[int]
    PACKET_FIELD_NUMBER: _ClassVar[int]
    LEASE_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PIN_FIELD_NUMBER: _ClassVar[int]
    accepted_job: AcceptedJob
    upload: Upload
    tenant_periods: TenantPeriods
    ledger_row: LedgerRow
    chain_head: ChainHeadRow
    job_index: JobIndexRow
    refused_event: RefusedEvent
    checkpoint_file: CheckpointFile
    checkpoint_key: CheckpointPublicKey
    packet: Packet
    lease_outcome: LeaseOutcome
    signature: Signature
    source_pin: SourcePinRow
    def __init__(self, accepted_job: _Optional[_Union[AcceptedJob, _Mapping]] = ..., upload: _Optional[_Union[Upload, _Mapping]] = ..., tenant_periods: _Optional[_Union[TenantPeriods, _Mapping]] = ..., ledger_row: _Optional[_Union[LedgerRow, _Mapping]] = ..., chain_head: _Optional[_Union[ChainHeadRow, _Mapping]] = ..., job_index: _Optional[_Union[JobIndexRow, _Mapping]] = ..., refused_event: _Optional[_Union[RefusedEvent, _Mapping]] = ..., checkpoint_file: _Optional[_Union[CheckpointFile, _Mapping]] = ..., checkpoint_key: _Optional[_Union[CheckpointPublicKey, _Mapping]] = ..., packet: _Optional[_Union[Packet, _Mapping]] = ..., lease_outcome: _Optional[_Union[LeaseOutcome, _Mapping]] = ..., signature: _Optional[_Union[Signature, _Mapping]] = ..., source_pin: _Optional[_Union[SourcePinRow, _Mapping]] = ...) -> None: ...

class AcceptedJob(_message.Message):
    __slots__ = ("job", "tenant", "create_time", "source_sha256", "references")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SHA256_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    job: str
    tenant: str
    create_time: _timestamp_pb2.Timestamp
    source_sha256: _containers.RepeatedScalarFieldContainer[str]
    references: _containers.RepeatedCompositeFieldContainer[SourceReference]
    def __init__(self, job: _Optional[str] = ..., tenant: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source_sha256: _Optional[_Iterable[str]] = ..., references: _Optional[_Iterable[_Union[SourceReference, _Mapping]]] = ...) -> None: ...

class SourceReference(_message.Message):
    __slots__ = ("system", "key")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    system: str
    key: str
    def __init__(self, system: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class Upload(_message.Message):
    __slots__ = ("tenant", "sha256", "size_bytes", "blob_key", "create_time")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    sha256: str
    size_bytes: int
    blob_key: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, tenant: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., blob_key: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TenantPeriods(_message.Message):
    __slots__ = ("tenant", "sources_seconds", "packets_seconds", "artifacts_seconds", "unused_uploads_seconds")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PACKETS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNUSED_UPLOADS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    sources_seconds: int
    packets_seconds: int
    artifacts_seconds: int
    unused_uploads_seconds: int
    def __init__(self, tenant: _Optional[str] = ..., sources_seconds: _Optional[int] = ..., packets_seconds: _Optional[int] = ..., artifacts_seconds: _Optional[int] = ..., unused_uploads_seconds: _Optional[int] = ...) -> None: ...

class LedgerRow(_message.Message):
    __slots__ = ("sequence", "event_id", "job", "tenant", "from_state", "to_state", "reason_code", "event", "prev_hash", "entry_hash")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    event_id: str
    job: str
    tenant: str
    from_state: str
    to_state: str
    reason_code: str
    event: bytes
    prev_hash: str
    entry_hash: str
    def __init__(self, sequence: _Optional[int] = ..., event_id: _Optional[str] = ..., job: _Optional[str] = ..., tenant: _Optional[str] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., reason_code: _Optional[str] = ..., event: _Optional[bytes] = ..., prev_hash: _Optional[str] = ..., entry_hash: _Optional[str] = ...) -> None: ...

class ChainHeadRow(_message.Message):
    __slots__ = ("tenant", "head_hash", "length")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    head_hash: str
    length: int
    def __init__(self, tenant: _Optional[str] = ..., head_hash: _Optional[str] = ..., length: _Optional[int] = ...) -> None: ...

class JobIndexRow(_message.Message):
    __slots__ = ("job", "tenant", "state", "reason_code", "item_count", "manifest_digest", "output_digest", "ruleset_version", "key_version")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RULESET_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_VERSION_FIELD_NUMBER: _ClassVar[int]
    job: str
    tenant: str
    state: str
    reason_code: str
    item_count: int
    manifest_digest: str
    output_digest: str
    ruleset_version: str
    key_version: str
    def __init__(self, job: _Optional[str] = ..., tenant: _Optional[str] = ..., state: _Optional[str] = ..., reason_code: _Optional[str] = ..., item_count: _Optional[int] = ..., manifest_digest: _Optional[str] = ..., output_digest: _Optional[str] = ..., ruleset_version: _Optional[str] = ..., key_version: _Optional[str] = ...) -> None: ...

class RefusedEvent(_message.Message):
    __slots__ = ("event_id", "job", "producer", "kind", "to_state", "refuse_time")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REFUSE_TIME_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    job: str
    producer: str
    kind: str
    to_state: str
    refuse_time: _timestamp_pb2.Timestamp
    def __init__(self, event_id: _Optional[str] = ..., job: _Optional[str] = ..., producer: _Optional[str] = ..., kind: _Optional[str] = ..., to_state: _Optional[str] = ..., refuse_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CheckpointFile(_message.Message):
    __slots__ = ("name", "content")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    content: bytes
    def __init__(self, name: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class CheckpointPublicKey(_message.Message):
    __slots__ = ("public_key_pem",)
    PUBLIC_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    public_key_pem: str
    def __init__(self, public_key_pem: _Optional[str] = ...) -> None: ...

class Packet(_message.Message):
    __slots__ = ("job", "blob_key", "sha256", "size_bytes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    job: str
    blob_key: str
    sha256: str
    size_bytes: int
    def __init__(self, job: _Optional[str] = ..., blob_key: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class LeaseOutcome(_message.Message):
    __slots__ = ("lease", "outcome")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    lease: str
    outcome: bytes
    def __init__(self, lease: _Optional[str] = ..., outcome: _Optional[bytes] = ...) -> None: ...

class Signature(_message.Message):
    __slots__ = ("job", "blob_key", "sha256", "size_bytes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    job: str
    blob_key: str
    sha256: str
    size_bytes: int
    def __init__(self, job: _Optional[str] = ..., blob_key: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class SourcePinRow(_message.Message):
    __slots__ = ("job", "blob_key")
    JOB_FIELD_NUMBER: _ClassVar[int]
    BLOB_KEY_FIELD_NUMBER: _ClassVar[int]
    job: str
    blob_key: str
    def __init__(self, job: _Optional[str] = ..., blob_key: _Optional[str] = ...) -> None: ...

class ExportFrame(_message.Message):
    __slots__ = ("page", "database_missing")
    PAGE_FIELD_NUMBER: _ClassVar[int]
    DATABASE_MISSING_FIELD_NUMBER: _ClassVar[int]
    page: ExportRecordsResponse
    database_missing: str
    def __init__(self, page: _Optional[_Union[ExportRecordsResponse, _Mapping]] = ..., database_missing: _Optional[str] = ...) -> None: ...
