import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListDiagnosticsRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class Diagnostic(_message.Message):
    __slots__ = ("job", "stage", "instance", "build_version", "attempt", "reason_code", "error_type", "message", "create_time", "expire_time")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    BUILD_VERSION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    job: str
    stage: str
    instance: str
    build_version: str
    attempt: int
    reason_code: str
    error_type: str
    message: str
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, job: _Optional[str] = ..., stage: _Optional[str] = ..., instance: _Optional[str] = ..., build_version: _Optional[str] = ..., attempt: _Optional[int] = ..., reason_code: _Optional[str] = ..., error_type: _Optional[str] = ..., message: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DiagnosticRead(_message.Message):
    __slots__ = ("reader", "read_time")
    READER_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    reader: str
    read_time: _timestamp_pb2.Timestamp
    def __init__(self, reader: _Optional[str] = ..., read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDiagnosticsResponse(_message.Message):
    __slots__ = ("diagnostics", "reads")
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    READS_FIELD_NUMBER: _ClassVar[int]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    reads: _containers.RepeatedCompositeFieldContainer[DiagnosticRead]
    def __init__(self, diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ..., reads: _Optional[_Iterable[_Union[DiagnosticRead, _Mapping]]] = ...) -> None: ...
