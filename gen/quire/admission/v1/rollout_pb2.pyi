import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RolloutState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_STATE_UNSPECIFIED: _ClassVar[RolloutState]
    ROLLOUT_STATE_CANARY: _ClassVar[RolloutState]
    ROLLOUT_STATE_PROMOTED: _ClassVar[RolloutState]
    ROLLOUT_STATE_ROLLED_BACK: _ClassVar[RolloutState]
ROLLOUT_STATE_UNSPECIFIED: RolloutState
ROLLOUT_STATE_CANARY: RolloutState
ROLLOUT_STATE_PROMOTED: RolloutState
ROLLOUT_STATE_ROLLED_BACK: RolloutState

class Rollout(_message.Message):
    __slots__ = ("name", "stage", "candidate_version", "candidate_ruleset", "share_basis_points", "tenants", "concurrency_cap", "state", "create_time", "update_time", "canary_share_basis_points")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_RULESET_FIELD_NUMBER: _ClassVar[int]
    SHARE_BASIS_POINTS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_CAP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CANARY_SHARE_BASIS_POINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    stage: str
    candidate_version: str
    candidate_ruleset: str
    share_basis_points: int
    tenants: _containers.RepeatedScalarFieldContainer[str]
    concurrency_cap: int
    state: RolloutState
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    canary_share_basis_points: int
    def __init__(self, name: _Optional[str] = ..., stage: _Optional[str] = ..., candidate_version: _Optional[str] = ..., candidate_ruleset: _Optional[str] = ..., share_basis_points: _Optional[int] = ..., tenants: _Optional[_Iterable[str]] = ..., concurrency_cap: _Optional[int] = ..., state: _Optional[_Union[RolloutState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., canary_share_basis_points: _Optional[int] = ...) -> None: ...

class StartRolloutRequest(_message.Message):
    __slots__ = ("rollout", "request_id")
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    request_id: str
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetRolloutRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListRolloutsRequest(_message.Message):
    __slots__ = ("stage", "open_only")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    OPEN_ONLY_FIELD_NUMBER: _ClassVar[int]
    stage: str
    open_only: bool
    def __init__(self, stage: _Optional[str] = ..., open_only: _Optional[bool] = ...) -> None: ...

class ListRolloutsResponse(_message.Message):
    __slots__ = ("rollouts",)
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    def __init__(self, rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ...) -> None: ...

class PromoteRolloutRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RollbackRolloutRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ListCurrentRulesetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CurrentRuleset(_message.Message):
    __slots__ = ("name", "version", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListCurrentRulesetsResponse(_message.Message):
    __slots__ = ("rulesets",)
    RULESETS_FIELD_NUMBER: _ClassVar[int]
    rulesets: _containers.RepeatedCompositeFieldContainer[CurrentRuleset]
    def __init__(self, rulesets: _Optional[_Iterable[_Union[CurrentRuleset, _Mapping]]] = ...) -> None: ...
