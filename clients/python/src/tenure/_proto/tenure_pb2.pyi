from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOCK_MODE_UNSPECIFIED: _ClassVar[LockMode]
    LOCK_MODE_SHARED: _ClassVar[LockMode]
    LOCK_MODE_EXCLUSIVE: _ClassVar[LockMode]

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_VOLATILE: _ClassVar[Durability]
    DURABILITY_PERSISTENT: _ClassVar[Durability]
LOCK_MODE_UNSPECIFIED: LockMode
LOCK_MODE_SHARED: LockMode
LOCK_MODE_EXCLUSIVE: LockMode
DURABILITY_VOLATILE: Durability
DURABILITY_PERSISTENT: Durability

class Error(_message.Message):
    __slots__ = ("not_manager", "unavailable", "session_expired", "deadlock", "timeout", "invalid_name", "too_large", "stale_token", "unknown_store", "would_block", "not_held", "rejected", "too_many_requests", "wrong_store", "request_id_reused", "invalid_request", "object_exists", "revision_mismatch", "no_such_object", "no_such_upload", "upload_incomplete", "no_such_part", "compacted", "data_unavailable", "permission_denied", "overloaded", "message")
    NOT_MANAGER_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    DEADLOCK_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INVALID_NAME_FIELD_NUMBER: _ClassVar[int]
    TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    STALE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_STORE_FIELD_NUMBER: _ClassVar[int]
    WOULD_BLOCK_FIELD_NUMBER: _ClassVar[int]
    NOT_HELD_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    TOO_MANY_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WRONG_STORE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_REUSED_FIELD_NUMBER: _ClassVar[int]
    INVALID_REQUEST_FIELD_NUMBER: _ClassVar[int]
    OBJECT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    NO_SUCH_OBJECT_FIELD_NUMBER: _ClassVar[int]
    NO_SUCH_UPLOAD_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    NO_SUCH_PART_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    DATA_UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_DENIED_FIELD_NUMBER: _ClassVar[int]
    OVERLOADED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    not_manager: NotManager
    unavailable: Unavailable
    session_expired: SessionExpired
    deadlock: Deadlock
    timeout: Timeout
    invalid_name: InvalidName
    too_large: TooLarge
    stale_token: StaleToken
    unknown_store: UnknownStore
    would_block: WouldBlock
    not_held: NotHeld
    rejected: Rejected
    too_many_requests: TooManyRequests
    wrong_store: WrongStore
    request_id_reused: RequestIdReused
    invalid_request: InvalidRequest
    object_exists: ObjectExists
    revision_mismatch: RevisionMismatch
    no_such_object: NoSuchObject
    no_such_upload: NoSuchUpload
    upload_incomplete: UploadIncomplete
    no_such_part: NoSuchPart
    compacted: Compacted
    data_unavailable: DataUnavailable
    permission_denied: PermissionDenied
    overloaded: Overloaded
    message: str
    def __init__(self, not_manager: _Optional[_Union[NotManager, _Mapping]] = ..., unavailable: _Optional[_Union[Unavailable, _Mapping]] = ..., session_expired: _Optional[_Union[SessionExpired, _Mapping]] = ..., deadlock: _Optional[_Union[Deadlock, _Mapping]] = ..., timeout: _Optional[_Union[Timeout, _Mapping]] = ..., invalid_name: _Optional[_Union[InvalidName, _Mapping]] = ..., too_large: _Optional[_Union[TooLarge, _Mapping]] = ..., stale_token: _Optional[_Union[StaleToken, _Mapping]] = ..., unknown_store: _Optional[_Union[UnknownStore, _Mapping]] = ..., would_block: _Optional[_Union[WouldBlock, _Mapping]] = ..., not_held: _Optional[_Union[NotHeld, _Mapping]] = ..., rejected: _Optional[_Union[Rejected, _Mapping]] = ..., too_many_requests: _Optional[_Union[TooManyRequests, _Mapping]] = ..., wrong_store: _Optional[_Union[WrongStore, _Mapping]] = ..., request_id_reused: _Optional[_Union[RequestIdReused, _Mapping]] = ..., invalid_request: _Optional[_Union[InvalidRequest, _Mapping]] = ..., object_exists: _Optional[_Union[ObjectExists, _Mapping]] = ..., revision_mismatch: _Optional[_Union[RevisionMismatch, _Mapping]] = ..., no_such_object: _Optional[_Union[NoSuchObject, _Mapping]] = ..., no_such_upload: _Optional[_Union[NoSuchUpload, _Mapping]] = ..., upload_incomplete: _Optional[_Union[UploadIncomplete, _Mapping]] = ..., no_such_part: _Optional[_Union[NoSuchPart, _Mapping]] = ..., compacted: _Optional[_Union[Compacted, _Mapping]] = ..., data_unavailable: _Optional[_Union[DataUnavailable, _Mapping]] = ..., permission_denied: _Optional[_Union[PermissionDenied, _Mapping]] = ..., overloaded: _Optional[_Union[Overloaded, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class NotManager(_message.Message):
    __slots__ = ("store", "hint_device", "hint_endpoint")
    STORE_FIELD_NUMBER: _ClassVar[int]
    HINT_DEVICE_FIELD_NUMBER: _ClassVar[int]
    HINT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    store: int
    hint_device: int
    hint_endpoint: str
    def __init__(self, store: _Optional[int] = ..., hint_device: _Optional[int] = ..., hint_endpoint: _Optional[str] = ...) -> None: ...

class Unavailable(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: int
    def __init__(self, store: _Optional[int] = ...) -> None: ...

class SessionExpired(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: int
    def __init__(self, session: _Optional[int] = ...) -> None: ...

class Deadlock(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Timeout(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class InvalidName(_message.Message):
    __slots__ = ("name", "reason", "store")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    store: int
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ..., store: _Optional[int] = ...) -> None: ...

class TooLarge(_message.Message):
    __slots__ = ("size", "limit")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    size: int
    limit: int
    def __init__(self, size: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class StaleToken(_message.Message):
    __slots__ = ("presented", "current")
    PRESENTED_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    presented: FencingToken
    current: FencingToken
    def __init__(self, presented: _Optional[_Union[FencingToken, _Mapping]] = ..., current: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class UnknownStore(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: int
    def __init__(self, store: _Optional[int] = ...) -> None: ...

class WouldBlock(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NotHeld(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Rejected(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class TooManyRequests(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class WrongStore(_message.Message):
    __slots__ = ("stream_store", "request_store")
    STREAM_STORE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_STORE_FIELD_NUMBER: _ClassVar[int]
    stream_store: int
    request_store: int
    def __init__(self, stream_store: _Optional[int] = ..., request_store: _Optional[int] = ...) -> None: ...

class RequestIdReused(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class InvalidRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ObjectExists(_message.Message):
    __slots__ = ("key", "revision")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    key: str
    revision: int
    def __init__(self, key: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class RevisionMismatch(_message.Message):
    __slots__ = ("key", "current")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    key: str
    current: int
    def __init__(self, key: _Optional[str] = ..., current: _Optional[int] = ...) -> None: ...

class NoSuchObject(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class NoSuchUpload(_message.Message):
    __slots__ = ("key", "upload")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    key: str
    upload: str
    def __init__(self, key: _Optional[str] = ..., upload: _Optional[str] = ...) -> None: ...

class UploadIncomplete(_message.Message):
    __slots__ = ("missing",)
    MISSING_FIELD_NUMBER: _ClassVar[int]
    missing: int
    def __init__(self, missing: _Optional[int] = ...) -> None: ...

class NoSuchPart(_message.Message):
    __slots__ = ("part",)
    PART_FIELD_NUMBER: _ClassVar[int]
    part: int
    def __init__(self, part: _Optional[int] = ...) -> None: ...

class Compacted(_message.Message):
    __slots__ = ("asked", "compacted")
    ASKED_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    asked: int
    compacted: int
    def __init__(self, asked: _Optional[int] = ..., compacted: _Optional[int] = ...) -> None: ...

class DataUnavailable(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class PermissionDenied(_message.Message):
    __slots__ = ("token", "permission", "path")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    token: str
    permission: str
    path: str
    def __init__(self, token: _Optional[str] = ..., permission: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class Overloaded(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("store", "key", "value")
    STORE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    store: int
    key: int
    value: int
    def __init__(self, store: _Optional[int] = ..., key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...

class Version(_message.Message):
    __slots__ = ("epoch", "seq")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    seq: int
    def __init__(self, epoch: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class Written(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: Version
    def __init__(self, version: _Optional[_Union[Version, _Mapping]] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Written
    error: Error
    def __init__(self, ok: _Optional[_Union[Written, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Resolved(_message.Message):
    __slots__ = ("name", "store", "manager", "endpoint")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    MANAGER_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    name: str
    store: int
    manager: int
    endpoint: str
    def __init__(self, name: _Optional[str] = ..., store: _Optional[int] = ..., manager: _Optional[int] = ..., endpoint: _Optional[str] = ...) -> None: ...

class ResolveResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Resolved
    error: Error
    def __init__(self, ok: _Optional[_Union[Resolved, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ChunkStatus(_message.Message):
    __slots__ = ("device", "serial", "store", "state", "epoch", "lease_manager")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_MANAGER_FIELD_NUMBER: _ClassVar[int]
    device: int
    serial: int
    store: int
    state: str
    epoch: int
    lease_manager: int
    def __init__(self, device: _Optional[int] = ..., serial: _Optional[int] = ..., store: _Optional[int] = ..., state: _Optional[str] = ..., epoch: _Optional[int] = ..., lease_manager: _Optional[int] = ...) -> None: ...

class ChunkRef(_message.Message):
    __slots__ = ("device", "serial")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    device: int
    serial: int
    def __init__(self, device: _Optional[int] = ..., serial: _Optional[int] = ...) -> None: ...

class ManagerStatus(_message.Message):
    __slots__ = ("store", "state", "epoch", "chunks", "failed", "sessions", "locks_held")
    STORE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    LOCKS_HELD_FIELD_NUMBER: _ClassVar[int]
    store: int
    state: str
    epoch: int
    chunks: _containers.RepeatedCompositeFieldContainer[ChunkRef]
    failed: _containers.RepeatedCompositeFieldContainer[ChunkRef]
    sessions: int
    locks_held: int
    def __init__(self, store: _Optional[int] = ..., state: _Optional[str] = ..., epoch: _Optional[int] = ..., chunks: _Optional[_Iterable[_Union[ChunkRef, _Mapping]]] = ..., failed: _Optional[_Iterable[_Union[ChunkRef, _Mapping]]] = ..., sessions: _Optional[int] = ..., locks_held: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("device", "stores", "devices", "chunks", "managers", "now_micros", "coordinator", "coordinator_term", "acting_coordinator", "version", "data_bytes")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    MANAGERS_FIELD_NUMBER: _ClassVar[int]
    NOW_MICROS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_TERM_FIELD_NUMBER: _ClassVar[int]
    ACTING_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    device: int
    stores: int
    devices: _containers.RepeatedScalarFieldContainer[int]
    chunks: _containers.RepeatedCompositeFieldContainer[ChunkStatus]
    managers: _containers.RepeatedCompositeFieldContainer[ManagerStatus]
    now_micros: int
    coordinator: int
    coordinator_term: int
    acting_coordinator: bool
    version: str
    data_bytes: int
    def __init__(self, device: _Optional[int] = ..., stores: _Optional[int] = ..., devices: _Optional[_Iterable[int]] = ..., chunks: _Optional[_Iterable[_Union[ChunkStatus, _Mapping]]] = ..., managers: _Optional[_Iterable[_Union[ManagerStatus, _Mapping]]] = ..., now_micros: _Optional[int] = ..., coordinator: _Optional[int] = ..., coordinator_term: _Optional[int] = ..., acting_coordinator: _Optional[bool] = ..., version: _Optional[str] = ..., data_bytes: _Optional[int] = ...) -> None: ...

class SessionRef(_message.Message):
    __slots__ = ("store", "id")
    STORE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    store: int
    id: int
    def __init__(self, store: _Optional[int] = ..., id: _Optional[int] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("store", "ttl_ms", "client_name", "request_id")
    STORE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    store: int
    ttl_ms: int
    client_name: str
    request_id: int
    def __init__(self, store: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., client_name: _Optional[str] = ..., request_id: _Optional[int] = ...) -> None: ...

class SessionOpened(_message.Message):
    __slots__ = ("session", "ttl_ms")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    ttl_ms: int
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: SessionOpened
    error: Error
    def __init__(self, ok: _Optional[_Union[SessionOpened, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ...) -> None: ...

class SessionAlive(_message.Message):
    __slots__ = ("session", "ttl_ms")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    ttl_ms: int
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: SessionAlive
    error: Error
    def __init__(self, ok: _Optional[_Union[SessionAlive, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ...) -> None: ...

class SessionClosed(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: SessionClosed
    error: Error
    def __init__(self, ok: _Optional[_Union[SessionClosed, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class FencingToken(_message.Message):
    __slots__ = ("epoch", "seq")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    seq: int
    def __init__(self, epoch: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("session", "name", "mode", "timeout_ms", "request_id", "lock_delay_ms", "no_wait")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    NO_WAIT_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    name: str
    mode: LockMode
    timeout_ms: int
    request_id: int
    lock_delay_ms: int
    no_wait: bool
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., name: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., timeout_ms: _Optional[int] = ..., request_id: _Optional[int] = ..., lock_delay_ms: _Optional[int] = ..., no_wait: _Optional[bool] = ..., **kwargs) -> None: ...

class Granted(_message.Message):
    __slots__ = ("name", "mode", "token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    mode: LockMode
    token: FencingToken
    def __init__(self, name: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Granted
    error: Error
    def __init__(self, ok: _Optional[_Union[Granted, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("session", "name", "request_id", "token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    name: str
    request_id: int
    token: FencingToken
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., name: _Optional[str] = ..., request_id: _Optional[int] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class Released(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Released
    error: Error
    def __init__(self, ok: _Optional[_Union[Released, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class LockHolder(_message.Message):
    __slots__ = ("session", "mode", "token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: SessionRef
    mode: LockMode
    token: FencingToken
    def __init__(self, session: _Optional[_Union[SessionRef, _Mapping]] = ..., mode: _Optional[_Union[LockMode, str]] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class HolderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Holders(_message.Message):
    __slots__ = ("name", "holders", "waiters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    holders: _containers.RepeatedCompositeFieldContainer[LockHolder]
    waiters: _containers.RepeatedCompositeFieldContainer[SessionRef]
    def __init__(self, name: _Optional[str] = ..., holders: _Optional[_Iterable[_Union[LockHolder, _Mapping]]] = ..., waiters: _Optional[_Iterable[_Union[SessionRef, _Mapping]]] = ...) -> None: ...

class HolderResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Holders
    error: Error
    def __init__(self, ok: _Optional[_Union[Holders, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ListLocksRequest(_message.Message):
    __slots__ = ("prefix", "limit", "store")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    limit: int
    store: int
    def __init__(self, prefix: _Optional[str] = ..., limit: _Optional[int] = ..., store: _Optional[int] = ...) -> None: ...

class LockEntry(_message.Message):
    __slots__ = ("name", "holders", "waiters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    holders: _containers.RepeatedCompositeFieldContainer[LockHolder]
    waiters: _containers.RepeatedCompositeFieldContainer[SessionRef]
    def __init__(self, name: _Optional[str] = ..., holders: _Optional[_Iterable[_Union[LockHolder, _Mapping]]] = ..., waiters: _Optional[_Iterable[_Union[SessionRef, _Mapping]]] = ...) -> None: ...

class LockList(_message.Message):
    __slots__ = ("locks",)
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[LockEntry]
    def __init__(self, locks: _Optional[_Iterable[_Union[LockEntry, _Mapping]]] = ...) -> None: ...

class ListLocksResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: LockList
    error: Error
    def __init__(self, ok: _Optional[_Union[LockList, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("request_id", "start", "open", "keep_alive", "close", "acquire", "release", "holder", "list_locks", "write", "watch_objects", "unwatch_objects")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LIST_LOCKS_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    WATCH_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    UNWATCH_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    start: StreamStart
    open: OpenSessionRequest
    keep_alive: StreamKeepAlive
    close: StreamClose
    acquire: AcquireRequest
    release: ReleaseRequest
    holder: HolderRequest
    list_locks: ListLocksRequest
    write: WriteRequest
    watch_objects: WatchObjects
    unwatch_objects: UnwatchObjects
    def __init__(self, request_id: _Optional[int] = ..., start: _Optional[_Union[StreamStart, _Mapping]] = ..., open: _Optional[_Union[OpenSessionRequest, _Mapping]] = ..., keep_alive: _Optional[_Union[StreamKeepAlive, _Mapping]] = ..., close: _Optional[_Union[StreamClose, _Mapping]] = ..., acquire: _Optional[_Union[AcquireRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseRequest, _Mapping]] = ..., holder: _Optional[_Union[HolderRequest, _Mapping]] = ..., list_locks: _Optional[_Union[ListLocksRequest, _Mapping]] = ..., write: _Optional[_Union[WriteRequest, _Mapping]] = ..., watch_objects: _Optional[_Union[WatchObjects, _Mapping]] = ..., unwatch_objects: _Optional[_Union[UnwatchObjects, _Mapping]] = ...) -> None: ...

class WatchObjects(_message.Message):
    __slots__ = ("watch", "prefix", "after", "include_values")
    WATCH_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VALUES_FIELD_NUMBER: _ClassVar[int]
    watch: int
    prefix: str
    after: int
    include_values: bool
    def __init__(self, watch: _Optional[int] = ..., prefix: _Optional[str] = ..., after: _Optional[int] = ..., include_values: _Optional[bool] = ...) -> None: ...

class UnwatchObjects(_message.Message):
    __slots__ = ("watch",)
    WATCH_FIELD_NUMBER: _ClassVar[int]
    watch: int
    def __init__(self, watch: _Optional[int] = ...) -> None: ...

class StreamStart(_message.Message):
    __slots__ = ("store", "resume", "client_name")
    STORE_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    store: int
    resume: int
    client_name: str
    def __init__(self, store: _Optional[int] = ..., resume: _Optional[int] = ..., client_name: _Optional[str] = ...) -> None: ...

class StreamKeepAlive(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamClose(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamStarted(_message.Message):
    __slots__ = ("store", "session", "max_in_flight", "max_request_bytes", "device")
    STORE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    store: int
    session: SessionAlive
    max_in_flight: int
    max_request_bytes: int
    device: int
    def __init__(self, store: _Optional[int] = ..., session: _Optional[_Union[SessionAlive, _Mapping]] = ..., max_in_flight: _Optional[int] = ..., max_request_bytes: _Optional[int] = ..., device: _Optional[int] = ...) -> None: ...

class Redirect(_message.Message):
    __slots__ = ("not_manager",)
    NOT_MANAGER_FIELD_NUMBER: _ClassVar[int]
    not_manager: NotManager
    def __init__(self, not_manager: _Optional[_Union[NotManager, _Mapping]] = ...) -> None: ...

class SessionExpiring(_message.Message):
    __slots__ = ("session", "remaining_ms")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    session: int
    remaining_ms: int
    def __init__(self, session: _Optional[int] = ..., remaining_ms: _Optional[int] = ...) -> None: ...

class SessionEnded(_message.Message):
    __slots__ = ("session", "expired")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    session: int
    expired: bool
    def __init__(self, session: _Optional[int] = ..., expired: _Optional[bool] = ...) -> None: ...

class StreamClosed(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("request_id", "started", "opened", "alive", "closed", "granted", "released", "holders", "locks", "written", "error", "redirect", "expiring", "ended", "stream_closed", "watching", "unwatched", "object_events", "watch_ended")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    OPENED_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REDIRECT_FIELD_NUMBER: _ClassVar[int]
    EXPIRING_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    STREAM_CLOSED_FIELD_NUMBER: _ClassVar[int]
    WATCHING_FIELD_NUMBER: _ClassVar[int]
    UNWATCHED_FIELD_NUMBER: _ClassVar[int]
    OBJECT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    WATCH_ENDED_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    started: StreamStarted
    opened: SessionOpened
    alive: SessionAlive
    closed: SessionClosed
    granted: Granted
    released: Released
    holders: Holders
    locks: LockList
    written: Written
    error: Error
    redirect: Redirect
    expiring: SessionExpiring
    ended: SessionEnded
    stream_closed: StreamClosed
    watching: Watching
    unwatched: Unwatched
    object_events: ObjectEvents
    watch_ended: WatchEnded
    def __init__(self, request_id: _Optional[int] = ..., started: _Optional[_Union[StreamStarted, _Mapping]] = ..., opened: _Optional[_Union[SessionOpened, _Mapping]] = ..., alive: _Optional[_Union[SessionAlive, _Mapping]] = ..., closed: _Optional[_Union[SessionClosed, _Mapping]] = ..., granted: _Optional[_Union[Granted, _Mapping]] = ..., released: _Optional[_Union[Released, _Mapping]] = ..., holders: _Optional[_Union[Holders, _Mapping]] = ..., locks: _Optional[_Union[LockList, _Mapping]] = ..., written: _Optional[_Union[Written, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., redirect: _Optional[_Union[Redirect, _Mapping]] = ..., expiring: _Optional[_Union[SessionExpiring, _Mapping]] = ..., ended: _Optional[_Union[SessionEnded, _Mapping]] = ..., stream_closed: _Optional[_Union[StreamClosed, _Mapping]] = ..., watching: _Optional[_Union[Watching, _Mapping]] = ..., unwatched: _Optional[_Union[Unwatched, _Mapping]] = ..., object_events: _Optional[_Union[ObjectEvents, _Mapping]] = ..., watch_ended: _Optional[_Union[WatchEnded, _Mapping]] = ...) -> None: ...

class Watching(_message.Message):
    __slots__ = ("watch", "revision")
    WATCH_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    watch: int
    revision: int
    def __init__(self, watch: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class Unwatched(_message.Message):
    __slots__ = ("watch",)
    WATCH_FIELD_NUMBER: _ClassVar[int]
    watch: int
    def __init__(self, watch: _Optional[int] = ...) -> None: ...

class ObjectEvents(_message.Message):
    __slots__ = ("watch", "changes")
    WATCH_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    watch: int
    changes: _containers.RepeatedCompositeFieldContainer[ObjectChange]
    def __init__(self, watch: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[ObjectChange, _Mapping]]] = ...) -> None: ...

class ObjectChange(_message.Message):
    __slots__ = ("revision", "key", "deleted", "uuid", "size", "checksum", "value")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    revision: int
    key: str
    deleted: bool
    uuid: str
    size: int
    checksum: int
    value: bytes
    def __init__(self, revision: _Optional[int] = ..., key: _Optional[str] = ..., deleted: _Optional[bool] = ..., uuid: _Optional[str] = ..., size: _Optional[int] = ..., checksum: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class WatchEnded(_message.Message):
    __slots__ = ("watch", "error")
    WATCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    watch: int
    error: Error
    def __init__(self, watch: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class LookupError(_message.Message):
    __slots__ = ("invalid_key", "too_large", "bad_interval", "no_leader", "stale_version", "unknown_subscription", "invalid_request", "message")
    INVALID_KEY_FIELD_NUMBER: _ClassVar[int]
    TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    BAD_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    NO_LEADER_FIELD_NUMBER: _ClassVar[int]
    STALE_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INVALID_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    invalid_key: InvalidKey
    too_large: ValueTooLarge
    bad_interval: BadInterval
    no_leader: NoLeader
    stale_version: StaleVersion
    unknown_subscription: UnknownSubscription
    invalid_request: InvalidLookupRequest
    message: str
    def __init__(self, invalid_key: _Optional[_Union[InvalidKey, _Mapping]] = ..., too_large: _Optional[_Union[ValueTooLarge, _Mapping]] = ..., bad_interval: _Optional[_Union[BadInterval, _Mapping]] = ..., no_leader: _Optional[_Union[NoLeader, _Mapping]] = ..., stale_version: _Optional[_Union[StaleVersion, _Mapping]] = ..., unknown_subscription: _Optional[_Union[UnknownSubscription, _Mapping]] = ..., invalid_request: _Optional[_Union[InvalidLookupRequest, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class InvalidKey(_message.Message):
    __slots__ = ("key", "reason")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    key: str
    reason: str
    def __init__(self, key: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ValueTooLarge(_message.Message):
    __slots__ = ("size", "limit")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    size: int
    limit: int
    def __init__(self, size: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class BadInterval(_message.Message):
    __slots__ = ("got_ms", "min_ms", "max_ms")
    GOT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    got_ms: int
    min_ms: int
    max_ms: int
    def __init__(self, got_ms: _Optional[int] = ..., min_ms: _Optional[int] = ..., max_ms: _Optional[int] = ...) -> None: ...

class NoLeader(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StaleVersion(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnknownSubscription(_message.Message):
    __slots__ = ("sub",)
    SUB_FIELD_NUMBER: _ClassVar[int]
    sub: int
    def __init__(self, sub: _Optional[int] = ...) -> None: ...

class InvalidLookupRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class EntryVersion(_message.Message):
    __slots__ = ("stamp", "provider")
    STAMP_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    stamp: int
    provider: int
    def __init__(self, stamp: _Optional[int] = ..., provider: _Optional[int] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("key", "value", "version", "interval_ms", "durability", "adapt_min_ms", "adapt_max_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    ADAPT_MIN_MS_FIELD_NUMBER: _ClassVar[int]
    ADAPT_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    version: EntryVersion
    interval_ms: int
    durability: Durability
    adapt_min_ms: int
    adapt_max_ms: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., version: _Optional[_Union[EntryVersion, _Mapping]] = ..., interval_ms: _Optional[int] = ..., durability: _Optional[_Union[Durability, str]] = ..., adapt_min_ms: _Optional[int] = ..., adapt_max_ms: _Optional[int] = ...) -> None: ...

class Meta(_message.Message):
    __slots__ = ("interval_ms", "durability", "reason")
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    durability: Durability
    reason: str
    def __init__(self, interval_ms: _Optional[int] = ..., durability: _Optional[_Union[Durability, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class Published(_message.Message):
    __slots__ = ("acked", "meta")
    ACKED_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    acked: bool
    meta: Meta
    def __init__(self, acked: _Optional[bool] = ..., meta: _Optional[_Union[Meta, _Mapping]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Published
    error: LookupError
    def __init__(self, ok: _Optional[_Union[Published, _Mapping]] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ...) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("key", "version", "durability")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: EntryVersion
    durability: Durability
    def __init__(self, key: _Optional[str] = ..., version: _Optional[_Union[EntryVersion, _Mapping]] = ..., durability: _Optional[_Union[Durability, str]] = ...) -> None: ...

class Revoked(_message.Message):
    __slots__ = ("acked",)
    ACKED_FIELD_NUMBER: _ClassVar[int]
    acked: bool
    def __init__(self, acked: _Optional[bool] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: Revoked
    error: LookupError
    def __init__(self, ok: _Optional[_Union[Revoked, _Mapping]] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ...) -> None: ...

class LookupEntry(_message.Message):
    __slots__ = ("key", "value", "version", "interval_ms", "durability", "age_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    version: EntryVersion
    interval_ms: int
    durability: Durability
    age_ms: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., version: _Optional[_Union[EntryVersion, _Mapping]] = ..., interval_ms: _Optional[int] = ..., durability: _Optional[_Union[Durability, str]] = ..., age_ms: _Optional[int] = ...) -> None: ...

class LeaderRef(_message.Message):
    __slots__ = ("start_micros", "device")
    START_MICROS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    start_micros: int
    device: int
    def __init__(self, start_micros: _Optional[int] = ..., device: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class GotEntry(_message.Message):
    __slots__ = ("entry", "leader")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    entry: LookupEntry
    leader: LeaderRef
    def __init__(self, entry: _Optional[_Union[LookupEntry, _Mapping]] = ..., leader: _Optional[_Union[LeaderRef, _Mapping]] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: GotEntry
    error: LookupError
    def __init__(self, ok: _Optional[_Union[GotEntry, _Mapping]] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class EntryList(_message.Message):
    __slots__ = ("entries", "leader")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LookupEntry]
    leader: LeaderRef
    def __init__(self, entries: _Optional[_Iterable[_Union[LookupEntry, _Mapping]]] = ..., leader: _Optional[_Union[LeaderRef, _Mapping]] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: EntryList
    error: LookupError
    def __init__(self, ok: _Optional[_Union[EntryList, _Mapping]] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ...) -> None: ...

class SubPosition(_message.Message):
    __slots__ = ("leader", "seq")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    leader: LeaderRef
    seq: int
    def __init__(self, leader: _Optional[_Union[LeaderRef, _Mapping]] = ..., seq: _Optional[int] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("sub", "prefix", "alert", "interval_ms", "position")
    SUB_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    ALERT_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    sub: int
    prefix: str
    alert: AlertSpec
    interval_ms: int
    position: SubPosition
    def __init__(self, sub: _Optional[int] = ..., prefix: _Optional[str] = ..., alert: _Optional[_Union[AlertSpec, _Mapping]] = ..., interval_ms: _Optional[int] = ..., position: _Optional[_Union[SubPosition, _Mapping]] = ...) -> None: ...

class AlertSpec(_message.Message):
    __slots__ = ("key", "within_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    within_ms: int
    def __init__(self, key: _Optional[str] = ..., within_ms: _Optional[int] = ...) -> None: ...

class Unsubscribe(_message.Message):
    __slots__ = ("sub",)
    SUB_FIELD_NUMBER: _ClassVar[int]
    sub: int
    def __init__(self, sub: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("request_id", "subscribe", "unsubscribe")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    subscribe: Subscribe
    unsubscribe: Unsubscribe
    def __init__(self, request_id: _Optional[int] = ..., subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., unsubscribe: _Optional[_Union[Unsubscribe, _Mapping]] = ...) -> None: ...

class Removed(_message.Message):
    __slots__ = ("key", "cause")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    key: str
    cause: str
    def __init__(self, key: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class Alert(_message.Message):
    __slots__ = ("key", "silent_for_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SILENT_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    silent_for_ms: int
    def __init__(self, key: _Optional[str] = ..., silent_for_ms: _Optional[int] = ...) -> None: ...

class Sync(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LookupEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[LookupEntry, _Mapping]]] = ...) -> None: ...

class WatchEventMsg(_message.Message):
    __slots__ = ("sub", "leader", "seq", "sync", "put", "removed", "alert")
    SUB_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    ALERT_FIELD_NUMBER: _ClassVar[int]
    sub: int
    leader: LeaderRef
    seq: int
    sync: Sync
    put: LookupEntry
    removed: Removed
    alert: Alert
    def __init__(self, sub: _Optional[int] = ..., leader: _Optional[_Union[LeaderRef, _Mapping]] = ..., seq: _Optional[int] = ..., sync: _Optional[_Union[Sync, _Mapping]] = ..., put: _Optional[_Union[LookupEntry, _Mapping]] = ..., removed: _Optional[_Union[Removed, _Mapping]] = ..., alert: _Optional[_Union[Alert, _Mapping]] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("request_id", "event", "subscribed", "unsubscribed", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    event: WatchEventMsg
    subscribed: int
    unsubscribed: int
    error: LookupError
    def __init__(self, request_id: _Optional[int] = ..., event: _Optional[_Union[WatchEventMsg, _Mapping]] = ..., subscribed: _Optional[int] = ..., unsubscribed: _Optional[int] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SssPeer(_message.Message):
    __slots__ = ("device", "start_micros")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    START_MICROS_FIELD_NUMBER: _ClassVar[int]
    device: int
    start_micros: int
    def __init__(self, device: _Optional[int] = ..., start_micros: _Optional[int] = ...) -> None: ...

class NodeStatusResponse(_message.Message):
    __slots__ = ("device", "state", "start_micros", "up", "leader", "entries", "subscriptions")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    START_MICROS_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    device: int
    state: str
    start_micros: int
    up: _containers.RepeatedCompositeFieldContainer[SssPeer]
    leader: int
    entries: int
    subscriptions: int
    def __init__(self, device: _Optional[int] = ..., state: _Optional[str] = ..., start_micros: _Optional[int] = ..., up: _Optional[_Iterable[_Union[SssPeer, _Mapping]]] = ..., leader: _Optional[int] = ..., entries: _Optional[int] = ..., subscriptions: _Optional[int] = ...) -> None: ...

class WatchObjectsRequest(_message.Message):
    __slots__ = ("prefix", "store", "after", "include_values")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VALUES_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    store: int
    after: int
    include_values: bool
    def __init__(self, prefix: _Optional[str] = ..., store: _Optional[int] = ..., after: _Optional[int] = ..., include_values: _Optional[bool] = ...) -> None: ...

class WatchObjectsResponse(_message.Message):
    __slots__ = ("watching", "events", "error")
    WATCHING_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    watching: Watching
    events: ObjectEvents
    error: Error
    def __init__(self, watching: _Optional[_Union[Watching, _Mapping]] = ..., events: _Optional[_Union[ObjectEvents, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("lock", "token")
    LOCK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    lock: str
    token: FencingToken
    def __init__(self, lock: _Optional[str] = ..., token: _Optional[_Union[FencingToken, _Mapping]] = ...) -> None: ...

class WriteConditions(_message.Message):
    __slots__ = ("if_absent", "if_revision", "fence")
    IF_ABSENT_FIELD_NUMBER: _ClassVar[int]
    IF_REVISION_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    if_absent: bool
    if_revision: int
    fence: Fence
    def __init__(self, if_absent: _Optional[bool] = ..., if_revision: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class PutObjectRequest(_message.Message):
    __slots__ = ("key", "data", "conditions", "ephemeral", "session", "request_id", "session_store")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORE_FIELD_NUMBER: _ClassVar[int]
    key: str
    data: bytes
    conditions: WriteConditions
    ephemeral: bool
    session: int
    request_id: int
    session_store: int
    def __init__(self, key: _Optional[str] = ..., data: _Optional[bytes] = ..., conditions: _Optional[_Union[WriteConditions, _Mapping]] = ..., ephemeral: _Optional[bool] = ..., session: _Optional[int] = ..., request_id: _Optional[int] = ..., session_store: _Optional[int] = ...) -> None: ...

class UploadHeader(_message.Message):
    __slots__ = ("key", "conditions", "ephemeral", "session", "request_id", "size", "session_store")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORE_FIELD_NUMBER: _ClassVar[int]
    key: str
    conditions: WriteConditions
    ephemeral: bool
    session: int
    request_id: int
    size: int
    session_store: int
    def __init__(self, key: _Optional[str] = ..., conditions: _Optional[_Union[WriteConditions, _Mapping]] = ..., ephemeral: _Optional[bool] = ..., session: _Optional[int] = ..., request_id: _Optional[int] = ..., size: _Optional[int] = ..., session_store: _Optional[int] = ...) -> None: ...

class UploadRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: UploadHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[UploadHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ObjectWritten(_message.Message):
    __slots__ = ("key", "revision", "uuid")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    key: str
    revision: int
    uuid: str
    def __init__(self, key: _Optional[str] = ..., revision: _Optional[int] = ..., uuid: _Optional[str] = ...) -> None: ...

class PutObjectResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: ObjectWritten
    error: Error
    def __init__(self, ok: _Optional[_Union[ObjectWritten, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ObjectInfo(_message.Message):
    __slots__ = ("key", "revision", "uuid", "size", "checksum", "owner_session", "blocks")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    OWNER_SESSION_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    key: str
    revision: int
    uuid: str
    size: int
    checksum: int
    owner_session: int
    blocks: int
    def __init__(self, key: _Optional[str] = ..., revision: _Optional[int] = ..., uuid: _Optional[str] = ..., size: _Optional[int] = ..., checksum: _Optional[int] = ..., owner_session: _Optional[int] = ..., blocks: _Optional[int] = ...) -> None: ...

class GetObjectRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class GetObjectResponse(_message.Message):
    __slots__ = ("meta", "data", "error")
    META_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    meta: ObjectInfo
    data: bytes
    error: Error
    def __init__(self, meta: _Optional[_Union[ObjectInfo, _Mapping]] = ..., data: _Optional[bytes] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class HeadObjectRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class HeadObjectResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: ObjectInfo
    error: Error
    def __init__(self, ok: _Optional[_Union[ObjectInfo, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class DeleteObjectRequest(_message.Message):
    __slots__ = ("key", "conditions", "session", "request_id", "session_store")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORE_FIELD_NUMBER: _ClassVar[int]
    key: str
    conditions: WriteConditions
    session: int
    request_id: int
    session_store: int
    def __init__(self, key: _Optional[str] = ..., conditions: _Optional[_Union[WriteConditions, _Mapping]] = ..., session: _Optional[int] = ..., request_id: _Optional[int] = ..., session_store: _Optional[int] = ...) -> None: ...

class ObjectDeleted(_message.Message):
    __slots__ = ("key", "revision")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    key: str
    revision: int
    def __init__(self, key: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class DeleteObjectResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: ObjectDeleted
    error: Error
    def __init__(self, ok: _Optional[_Union[ObjectDeleted, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ListObjectsRequest(_message.Message):
    __slots__ = ("prefix", "store", "limit")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    store: int
    limit: int
    def __init__(self, prefix: _Optional[str] = ..., store: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ObjectList(_message.Message):
    __slots__ = ("store", "revision", "objects")
    STORE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    store: int
    revision: int
    objects: _containers.RepeatedCompositeFieldContainer[ObjectInfo]
    def __init__(self, store: _Optional[int] = ..., revision: _Optional[int] = ..., objects: _Optional[_Iterable[_Union[ObjectInfo, _Mapping]]] = ...) -> None: ...

class ListObjectsResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: ObjectList
    error: Error
    def __init__(self, ok: _Optional[_Union[ObjectList, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class MultipartInitiateRequest(_message.Message):
    __slots__ = ("key", "session", "request_id", "session_store")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORE_FIELD_NUMBER: _ClassVar[int]
    key: str
    session: int
    request_id: int
    session_store: int
    def __init__(self, key: _Optional[str] = ..., session: _Optional[int] = ..., request_id: _Optional[int] = ..., session_store: _Optional[int] = ...) -> None: ...

class UploadStarted(_message.Message):
    __slots__ = ("key", "upload")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    key: str
    upload: str
    def __init__(self, key: _Optional[str] = ..., upload: _Optional[str] = ...) -> None: ...

class MultipartInitiateResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: UploadStarted
    error: Error
    def __init__(self, ok: _Optional[_Union[UploadStarted, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class PartHeader(_message.Message):
    __slots__ = ("key", "upload", "part", "size")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    key: str
    upload: str
    part: int
    size: int
    def __init__(self, key: _Optional[str] = ..., upload: _Optional[str] = ..., part: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class UploadPartRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: PartHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[PartHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class PartStored(_message.Message):
    __slots__ = ("part", "checksum")
    PART_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    part: int
    checksum: int
    def __init__(self, part: _Optional[int] = ..., checksum: _Optional[int] = ...) -> None: ...

class UploadPartResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: PartStored
    error: Error
    def __init__(self, ok: _Optional[_Union[PartStored, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class MultipartCompleteRequest(_message.Message):
    __slots__ = ("key", "upload", "parts", "conditions", "session", "request_id", "session_store")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_STORE_FIELD_NUMBER: _ClassVar[int]
    key: str
    upload: str
    parts: _containers.RepeatedScalarFieldContainer[int]
    conditions: WriteConditions
    session: int
    request_id: int
    session_store: int
    def __init__(self, key: _Optional[str] = ..., upload: _Optional[str] = ..., parts: _Optional[_Iterable[int]] = ..., conditions: _Optional[_Union[WriteConditions, _Mapping]] = ..., session: _Optional[int] = ..., request_id: _Optional[int] = ..., session_store: _Optional[int] = ...) -> None: ...

class MultipartAbortRequest(_message.Message):
    __slots__ = ("key", "upload")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    key: str
    upload: str
    def __init__(self, key: _Optional[str] = ..., upload: _Optional[str] = ...) -> None: ...

class UploadAborted(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MultipartAbortResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: UploadAborted
    error: Error
    def __init__(self, ok: _Optional[_Union[UploadAborted, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...
