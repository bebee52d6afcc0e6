from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class AddCheckpointRequest(_message.Message):
    __slots__ = ("old_size", "consistency_proof", "checkpoint", "log_public_key")
    OLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_PROOF_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LOG_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    old_size: int
    consistency_proof: _containers.RepeatedScalarFieldContainer[bytes]
    checkpoint: bytes
    log_public_key: bytes
    def __init__(self, old_size: _Optional[int] = ..., consistency_proof: _Optional[_Iterable[bytes]] = ..., checkpoint: _Optional[bytes] = ..., log_public_key: _Optional[bytes] = ...) -> None: ...

class Cosignature(_message.Message):
    __slots__ = ("line", "size")
    LINE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    line: str
    size: int
    def __init__(self, line: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class GetWitnessKeyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WitnessKey(_message.Message):
    __slots__ = ("verifier_key", "name", "public_key_sha256")
    VERIFIER_KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_SHA256_FIELD_NUMBER: _ClassVar[int]
    verifier_key: str
    name: str
    public_key_sha256: str
    def __init__(self, verifier_key: _Optional[str] = ..., name: _Optional[str] = ..., public_key_sha256: _Optional[str] = ...) -> None: ...
