import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NotificationEndpoint(_message.Message):
    __slots__ = ("url", "create_time")
    URL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    url: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, url: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetNotificationEndpointRequest(_message.Message):
    __slots__ = ("url", "request_id", "rotate_secret")
    URL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ROTATE_SECRET_FIELD_NUMBER: _ClassVar[int]
    url: str
    request_id: str
    rotate_secret: bool
    def __init__(self, url: _Optional[str] = ..., request_id: _Optional[str] = ..., rotate_secret: _Optional[bool] = ...) -> None: ...

class SetNotificationEndpointResponse(_message.Message):
    __slots__ = ("endpoint", "secret", "secret_withheld")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    SECRET_WITHHELD_FIELD_NUMBER: _ClassVar[int]
    endpoint: NotificationEndpoint
    secret: str
    secret_withheld: bool
    def __init__(self, endpoint: _Optional[_Union[NotificationEndpoint, _Mapping]] = ..., secret: _Optional[str] = ..., secret_withheld: _Optional[bool] = ...) -> None: ...

class GetNotificationEndpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNotificationAttemptsRequest(_message.Message):
    __slots__ = ("subject",)
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    subject: str
    def __init__(self, subject: _Optional[str] = ...) -> None: ...

class NotificationAttempt(_message.Message):
    __slots__ = ("attempt", "attempt_time", "http_status", "outcome")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    attempt_time: _timestamp_pb2.Timestamp
    http_status: int
    outcome: str
    def __init__(self, attempt: _Optional[int] = ..., attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., http_status: _Optional[int] = ..., outcome: _Optional[str] = ...) -> None: ...

class ListNotificationAttemptsResponse(_message.Message):
    __slots__ = ("attempts", "deliver_time")
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[NotificationAttempt]
    deliver_time: _timestamp_pb2.Timestamp
    def __init__(self, attempts: _Optional[_Iterable[_Union[NotificationAttempt, _Mapping]]] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
