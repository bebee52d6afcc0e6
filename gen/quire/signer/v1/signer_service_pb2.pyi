import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quire.type import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RotateKeyRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class GetSignatureRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class Signature(_message.Message):
    __slots__ = ("job", "artifact", "signing")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SIGNING_FIELD_NUMBER: _ClassVar[int]
    job: str
    artifact: _job_pb2.Artifact
    signing: _job_pb2.SigningRecord
    def __init__(self, job: _Optional[str] = ..., artifact: _Optional[_Union[_job_pb2.Artifact, _Mapping]] = ..., signing: _Optional[_Union[_job_pb2.SigningRecord, _Mapping]] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SigningKey(_message.Message):
    __slots__ = ("version", "certificate_sha256", "certificate_pem", "not_before_time", "not_after_time", "active")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_SHA256_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_TIME_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_TIME_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    version: str
    certificate_sha256: str
    certificate_pem: str
    not_before_time: _timestamp_pb2.Timestamp
    not_after_time: _timestamp_pb2.Timestamp
    active: bool
    def __init__(self, version: _Optional[str] = ..., certificate_sha256: _Optional[str] = ..., certificate_pem: _Optional[str] = ..., not_before_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., not_after_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active: _Optional[bool] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[SigningKey]
    next_page_token: str
    def __init__(self, keys: _Optional[_Iterable[_Union[SigningKey, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
