from . import tenure_pb2 as _tenure_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaderRecord(_message.Message):
    __slots__ = ("value", "token", "session", "session_store")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORE_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    token: _tenure_pb2.FencingToken
    session: int
    session_store: int
    def __init__(self, value: _Optional[bytes] = ..., token: _Optional[_Union[_tenure_pb2.FencingToken, _Mapping]] = ..., session: _Optional[int] = ..., session_store: _Optional[int] = ...) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("name", "value", "token", "session", "revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: bytes
    token: _tenure_pb2.FencingToken
    session: _tenure_pb2.SessionRef
    revision: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[bytes] = ..., token: _Optional[_Union[_tenure_pb2.FencingToken, _Mapping]] = ..., session: _Optional[_Union[_tenure_pb2.SessionRef, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class CampaignRequest(_message.Message):
    __slots__ = ("name", "value", "session", "request_id", "timeout_ms", "no_wait")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRY_FIELD_NUMBER: _ClassVar[int]
    NO_WAIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: bytes
    session: _tenure_pb2.SessionRef
    request_id: int
    timeout_ms: int
    no_wait: bool
    def __init__(self, name: _Optional[str] = ..., value: _Optional[bytes] = ..., session: _Optional[_Union[_tenure_pb2.SessionRef, _Mapping]] = ..., request_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., no_wait: _Optional[bool] = ..., **kwargs) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: LeaderInfo
    error: _tenure_pb2.Error
    def __init__(self, ok: _Optional[_Union[LeaderInfo, _Mapping]] = ..., error: _Optional[_Union[_tenure_pb2.Error, _Mapping]] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ("name", "value", "session", "token", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: bytes
    session: _tenure_pb2.SessionRef
    token: _tenure_pb2.FencingToken
    request_id: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[bytes] = ..., session: _Optional[_Union[_tenure_pb2.SessionRef, _Mapping]] = ..., token: _Optional[_Union[_tenure_pb2.FencingToken, _Mapping]] = ..., request_id: _Optional[int] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: LeaderInfo
    error: _tenure_pb2.Error
    def __init__(self, ok: _Optional[_Union[LeaderInfo, _Mapping]] = ..., error: _Optional[_Union[_tenure_pb2.Error, _Mapping]] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ("name", "session", "token", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    session: _tenure_pb2.SessionRef
    token: _tenure_pb2.FencingToken
    request_id: int
    def __init__(self, name: _Optional[str] = ..., session: _Optional[_Union[_tenure_pb2.SessionRef, _Mapping]] = ..., token: _Optional[_Union[_tenure_pb2.FencingToken, _Mapping]] = ..., request_id: _Optional[int] = ...) -> None: ...

class Resigned(_message.Message):
    __slots__ = ("was_leader",)
    WAS_LEADER_FIELD_NUMBER: _ClassVar[int]
    was_leader: bool
    def __init__(self, was_leader: _Optional[bool] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Resigned
    error: _tenure_pb2.Error
    def __init__(self, ok: _Optional[_Union[Resigned, _Mapping]] = ..., error: _Optional[_Union[_tenure_pb2.Error, _Mapping]] = ...) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CurrentLeader(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: LeaderInfo
    def __init__(self, leader: _Optional[_Union[LeaderInfo, _Mapping]] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: CurrentLeader
    error: _tenure_pb2.Error
    def __init__(self, ok: _Optional[_Union[CurrentLeader, _Mapping]] = ..., error: _Optional[_Union[_tenure_pb2.Error, _Mapping]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("name", "after")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    name: str
    after: int
    def __init__(self, name: _Optional[str] = ..., after: _Optional[int] = ...) -> None: ...

class LeaderChange(_message.Message):
    __slots__ = ("revision", "leader")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    revision: int
    leader: LeaderInfo
    def __init__(self, revision: _Optional[int] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("change", "error")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    change: LeaderChange
    error: _tenure_pb2.Error
    def __init__(self, change: _Optional[_Union[LeaderChange, _Mapping]] = ..., error: _Optional[_Union[_tenure_pb2.Error, _Mapping]] = ...) -> None: ...
