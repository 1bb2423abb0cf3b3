from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATE_UNSPECIFIED: _ClassVar[MemberState]
    MEMBER_STATE_ACTIVE: _ClassVar[MemberState]
    MEMBER_STATE_RETIRING: _ClassVar[MemberState]
MEMBER_STATE_UNSPECIFIED: MemberState
MEMBER_STATE_ACTIVE: MemberState
MEMBER_STATE_RETIRING: MemberState

class AddDeviceRequest(_message.Message):
    __slots__ = ("id", "peer_addr", "client_addr")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: int
    peer_addr: str
    client_addr: str
    def __init__(self, id: _Optional[int] = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ...) -> None: ...

class RemoveDeviceRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MembershipResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Membership
    error: MembershipError
    def __init__(self, ok: _Optional[_Union[Membership, _Mapping]] = ..., error: _Optional[_Union[MembershipError, _Mapping]] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "state", "peer_addr", "client_addr")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: int
    state: MemberState
    peer_addr: str
    client_addr: str
    def __init__(self, id: _Optional[int] = ..., state: _Optional[_Union[MemberState, str]] = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ...) -> None: ...

class Membership(_message.Message):
    __slots__ = ("device", "version", "version_term", "version_coordinator", "members", "retired", "coordinator", "coordinator_term")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_TERM_FIELD_NUMBER: _ClassVar[int]
    VERSION_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_TERM_FIELD_NUMBER: _ClassVar[int]
    device: int
    version: int
    version_term: int
    version_coordinator: int
    members: _containers.RepeatedCompositeFieldContainer[Member]
    retired: _containers.RepeatedScalarFieldContainer[int]
    coordinator: int
    coordinator_term: int
    def __init__(self, device: _Optional[int] = ..., version: _Optional[int] = ..., version_term: _Optional[int] = ..., version_coordinator: _Optional[int] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., retired: _Optional[_Iterable[int]] = ..., coordinator: _Optional[int] = ..., coordinator_term: _Optional[int] = ...) -> None: ...

class MembershipError(_message.Message):
    __slots__ = ("no_coordinator", "retired", "not_member", "too_few_devices")
    NO_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    NOT_MEMBER_FIELD_NUMBER: _ClassVar[int]
    TOO_FEW_DEVICES_FIELD_NUMBER: _ClassVar[int]
    no_coordinator: str
    retired: str
    not_member: str
    too_few_devices: str
    def __init__(self, no_coordinator: _Optional[str] = ..., retired: _Optional[str] = ..., not_member: _Optional[str] = ..., too_few_devices: _Optional[str] = ...) -> None: ...
