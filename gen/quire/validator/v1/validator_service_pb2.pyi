from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetValidationRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class DocumentFinding(_message.Message):
    __slots__ = ("position", "sha256", "detected_type", "page_count", "reason_code")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DETECTED_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    position: int
    sha256: str
    detected_type: str
    page_count: int
    reason_code: str
    def __init__(self, position: _Optional[int] = ..., sha256: _Optional[str] = ..., detected_type: _Optional[str] = ..., page_count: _Optional[int] = ..., reason_code: _Optional[str] = ...) -> None: ...

class Validation(_message.Message):
    __slots__ = ("job", "verdict", "reason_code", "documents", "lease_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    verdict: str
    reason_code: str
    documents: _containers.RepeatedCompositeFieldContainer[DocumentFinding]
    lease_token: int
    def __init__(self, job: _Optional[str] = ..., verdict: _Optional[str] = ..., reason_code: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[DocumentFinding, _Mapping]]] = ..., lease_token: _Optional[int] = ...) -> None: ...
