from quire.type import job_pb2 as _job_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetAssemblyRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class Assembly(_message.Message):
    __slots__ = ("job", "artifact", "lease_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    artifact: _job_pb2.Artifact
    lease_token: int
    def __init__(self, job: _Optional[str] = ..., artifact: _Optional[_Union[_job_pb2.Artifact, _Mapping]] = ..., lease_token: _Optional[int] = ...) -> None: ...
