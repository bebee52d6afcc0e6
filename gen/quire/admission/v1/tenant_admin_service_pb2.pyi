import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quire.admission.v1 import batch_pb2 as _batch_pb2
from quire.admission.v1 import rollout_pb2 as _rollout_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TenantRetention(_message.Message):
    __slots__ = ("sources_seconds", "packets_seconds", "artifacts_seconds", "unused_uploads_seconds")
    SOURCES_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PACKETS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNUSED_UPLOADS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    sources_seconds: int
    packets_seconds: int
    artifacts_seconds: int
    unused_uploads_seconds: int
    def __init__(self, sources_seconds: _Optional[int] = ..., packets_seconds: _Optional[int] = ..., artifacts_seconds: _Optional[int] = ..., unused_uploads_seconds: _Optional[int] = ...) -> None: ...

class UpdateTenantRetentionRequest(_message.Message):
    __slots__ = ("name", "retention", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    retention: TenantRetention
    request_id: str
    def __init__(self, name: _Optional[str] = ..., retention: _Optional[_Union[TenantRetention, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ForgetSourceRequest(_message.Message):
    __slots__ = ("tenant", "sha256", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    sha256: str
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., sha256: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ForgetSourceResponse(_message.Message):
    __slots__ = ("forgotten",)
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    forgotten: bool
    def __init__(self, forgotten: _Optional[bool] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Operator(_message.Message):
    __slots__ = ("token", "role")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    token: str
    role: str
    def __init__(self, token: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("name", "create_time", "revoke_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    create_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TenantLimits(_message.Message):
    __slots__ = ("max_upload_bytes", "max_outstanding_jobs", "storage_quota_bytes", "scheduling_weight")
    MAX_UPLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_JOBS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    max_upload_bytes: int
    max_outstanding_jobs: int
    storage_quota_bytes: int
    scheduling_weight: int
    def __init__(self, max_upload_bytes: _Optional[int] = ..., max_outstanding_jobs: _Optional[int] = ..., storage_quota_bytes: _Optional[int] = ..., scheduling_weight: _Optional[int] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("name", "display_name", "limits", "create_time", "tokens", "retention")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    limits: TenantLimits
    create_time: _timestamp_pb2.Timestamp
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    retention: TenantRetention
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., limits: _Optional[_Union[TenantLimits, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ..., retention: _Optional[_Union[TenantRetention, _Mapping]] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("display_name", "limits", "retention", "request_id")
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    display_name: str
    limits: TenantLimits
    retention: TenantRetention
    request_id: str
    def __init__(self, display_name: _Optional[str] = ..., limits: _Optional[_Union[TenantLimits, _Mapping]] = ..., retention: _Optional[_Union[TenantRetention, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTenantResponse(_message.Message):
    __slots__ = ("tenant", "secret", "secret_withheld")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    SECRET_WITHHELD_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    secret: str
    secret_withheld: bool
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ..., secret: _Optional[str] = ..., secret_withheld: _Optional[bool] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "next_page_token")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    next_page_token: str
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateTenantLimitsRequest(_message.Message):
    __slots__ = ("name", "limits", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    limits: TenantLimits
    request_id: str
    def __init__(self, name: _Optional[str] = ..., limits: _Optional[_Union[TenantLimits, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("tenant", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "secret", "secret_withheld")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    SECRET_WITHHELD_FIELD_NUMBER: _ClassVar[int]
    token: Token
    secret: str
    secret_withheld: bool
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., secret: _Optional[str] = ..., secret_withheld: _Optional[bool] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SourceSystem(_message.Message):
    __slots__ = ("name", "base_url", "credential_ref", "timeout", "max_bytes", "schema", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_REF_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    base_url: str
    credential_ref: str
    timeout: _duration_pb2.Duration
    max_bytes: int
    schema: str
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., base_url: _Optional[str] = ..., credential_ref: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_bytes: _Optional[int] = ..., schema: _Optional[str] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PutSourceSystemRequest(_message.Message):
    __slots__ = ("source_system",)
    SOURCE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    source_system: SourceSystem
    def __init__(self, source_system: _Optional[_Union[SourceSystem, _Mapping]] = ...) -> None: ...

class ListSourceSystemsRequest(_message.Message):
    __slots__ = ("parent",)
    PARENT_FIELD_NUMBER: _ClassVar[int]
    parent: str
    def __init__(self, parent: _Optional[str] = ...) -> None: ...

class ListSourceSystemsResponse(_message.Message):
    __slots__ = ("source_systems",)
    SOURCE_SYSTEMS_FIELD_NUMBER: _ClassVar[int]
    source_systems: _containers.RepeatedCompositeFieldContainer[SourceSystem]
    def __init__(self, source_systems: _Optional[_Iterable[_Union[SourceSystem, _Mapping]]] = ...) -> None: ...

class DeleteSourceSystemRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteSourceSystemResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueReading(_message.Message):
    __slots__ = ("stage", "ready", "oldest_age", "candidate")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    OLDEST_AGE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    stage: str
    ready: int
    oldest_age: _duration_pb2.Duration
    candidate: bool
    def __init__(self, stage: _Optional[str] = ..., ready: _Optional[int] = ..., oldest_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., candidate: _Optional[bool] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueReading]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueReading, _Mapping]]] = ...) -> None: ...

class ListTenantBatchesRequest(_message.Message):
    __slots__ = ("tenant", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class TenantBatch(_message.Message):
    __slots__ = ("tenant", "batch")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    batch: _batch_pb2.Batch
    def __init__(self, tenant: _Optional[str] = ..., batch: _Optional[_Union[_batch_pb2.Batch, _Mapping]] = ...) -> None: ...

class ListTenantBatchesResponse(_message.Message):
    __slots__ = ("batches", "next_page_token")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[TenantBatch]
    next_page_token: str
    def __init__(self, batches: _Optional[_Iterable[_Union[TenantBatch, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetTenantBatchRequest(_message.Message):
    __slots__ = ("tenant", "name")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    name: str
    def __init__(self, tenant: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListTenantBatchJobsRequest(_message.Message):
    __slots__ = ("tenant", "parent", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    parent: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...
