from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SnapshotError(_message.Message):
    __slots__ = ("invalid_id", "no_such_part", "failed", "timeout", "storage", "busy")
    INVALID_ID_FIELD_NUMBER: _ClassVar[int]
    NO_SUCH_PART_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    invalid_id: str
    no_such_part: str
    failed: str
    timeout: str
    storage: str
    busy: str
    def __init__(self, invalid_id: _Optional[str] = ..., no_such_part: _Optional[str] = ..., failed: _Optional[str] = ..., timeout: _Optional[str] = ..., storage: _Optional[str] = ..., busy: _Optional[str] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("id", "ok", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    ok: SnapshotCreated
    error: SnapshotError
    def __init__(self, id: _Optional[str] = ..., ok: _Optional[_Union[SnapshotCreated, _Mapping]] = ..., error: _Optional[_Union[SnapshotError, _Mapping]] = ...) -> None: ...

class SnapshotCreated(_message.Message):
    __slots__ = ("initiator", "devices", "terminated", "duration_us")
    INITIATOR_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_US_FIELD_NUMBER: _ClassVar[int]
    initiator: int
    devices: _containers.RepeatedScalarFieldContainer[int]
    terminated: bool
    duration_us: int
    def __init__(self, initiator: _Optional[int] = ..., devices: _Optional[_Iterable[int]] = ..., terminated: _Optional[bool] = ..., duration_us: _Optional[int] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("device", "snapshots")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    device: int
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotEntry]
    def __init__(self, device: _Optional[int] = ..., snapshots: _Optional[_Iterable[_Union[SnapshotEntry, _Mapping]]] = ...) -> None: ...

class SnapshotEntry(_message.Message):
    __slots__ = ("id", "initiated_here", "status", "error", "devices", "terminated", "part", "unix_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    INITIATED_HERE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    initiated_here: bool
    status: str
    error: str
    devices: _containers.RepeatedScalarFieldContainer[int]
    terminated: bool
    part: SnapshotPartInfo
    unix_ms: int
    def __init__(self, id: _Optional[str] = ..., initiated_here: _Optional[bool] = ..., status: _Optional[str] = ..., error: _Optional[str] = ..., devices: _Optional[_Iterable[int]] = ..., terminated: _Optional[bool] = ..., part: _Optional[_Union[SnapshotPartInfo, _Mapping]] = ..., unix_ms: _Optional[int] = ...) -> None: ...

class SnapshotPartInfo(_message.Message):
    __slots__ = ("bytes", "crc32")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    crc32: int
    def __init__(self, bytes: _Optional[int] = ..., crc32: _Optional[int] = ...) -> None: ...

class FetchPartRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class FetchPartResponse(_message.Message):
    __slots__ = ("header", "data", "error")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    header: SnapshotPartHeader
    data: bytes
    error: SnapshotError
    def __init__(self, header: _Optional[_Union[SnapshotPartHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., error: _Optional[_Union[SnapshotError, _Mapping]] = ...) -> None: ...

class SnapshotPartHeader(_message.Message):
    __slots__ = ("id", "device", "part")
    ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    id: str
    device: int
    part: SnapshotPartInfo
    def __init__(self, id: _Optional[str] = ..., device: _Optional[int] = ..., part: _Optional[_Union[SnapshotPartInfo, _Mapping]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ("device", "deleted", "error")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    device: int
    deleted: bool
    error: SnapshotError
    def __init__(self, device: _Optional[int] = ..., deleted: _Optional[bool] = ..., error: _Optional[_Union[SnapshotError, _Mapping]] = ...) -> None: ...
