"""Values the Tenure client returns: fencing tokens, object descriptions, leaders, lookup
entries, device status. Plain frozen dataclasses, shared by the sync and asyncio APIs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, NamedTuple, Optional

from ._proto import tenure_pb2 as pb

__all__ = [
    "FencingToken",
    "Resolved",
    "ManagerStatus",
    "DeviceStatus",
    "Holder",
    "LockState",
    "ObjectInfo",
    "Object",
    "ObjectWritten",
    "Listing",
    "ObjectChange",
    "Leader",
    "LeaderChange",
    "LookupEntry",
    "LookupChange",
]


class FencingToken(NamedTuple):
    """A lock grant's fencing token: strictly increasing per store across failovers.
    Tokens compare as ``(epoch, seq)`` tuples; a resource remembers the largest token it
    saw and refuses requests carrying a smaller one. ``str(token)`` is ``"epoch.seq"``."""

    epoch: int
    seq: int

    def __str__(self) -> str:
        return f"{self.epoch}.{self.seq}"

    @classmethod
    def parse(cls, text: str) -> "FencingToken":
        """Parse ``"epoch.seq"`` (as ``str(token)`` and ``TENURE_FENCING_TOKEN`` show it)."""
        epoch, _, seq = text.strip().partition(".")
        return cls(int(epoch), int(seq))

    def _to_proto(self) -> pb.FencingToken:
        return pb.FencingToken(epoch=self.epoch, seq=self.seq)

    @classmethod
    def _from_proto(cls, t: Any) -> "FencingToken":
        return cls(t.epoch, t.seq)


@dataclass(frozen=True)
class Resolved:
    """Where a name lives: its store, and the store's manager (device id and client
    endpoint) as the answering device knows it (``None`` when not known there now)."""

    name: str
    store: int
    manager: Optional[int]
    endpoint: Optional[str]

    @classmethod
    def _from_proto(cls, r: Any) -> "Resolved":
        return cls(
            name=r.name,
            store=r.store,
            manager=r.manager if r.HasField("manager") else None,
            endpoint=r.endpoint or None,
        )


@dataclass(frozen=True)
class ManagerStatus:
    """A store the device manages: its state, epoch, open sessions and held locks."""

    store: int
    state: str
    epoch: int
    sessions: int
    locks_held: int


@dataclass(frozen=True)
class DeviceStatus:
    """One device's view (``Tenure.Status``). ``raw`` is the full ``StatusResponse``."""

    endpoint: str
    device: int
    version: str
    stores: int
    devices: List[int]
    managers: List[ManagerStatus]
    coordinator: Optional[int]
    now_micros: int
    raw: Any = field(repr=False, compare=False, default=None)

    @classmethod
    def _from_proto(cls, endpoint: str, s: Any) -> "DeviceStatus":
        return cls(
            endpoint=endpoint,
            device=s.device,
            version=s.version,
            stores=s.stores,
            devices=list(s.devices),
            managers=[
                ManagerStatus(m.store, m.state, m.epoch, m.sessions, m.locks_held)
                for m in s.managers
            ],
            coordinator=s.coordinator if s.HasField("coordinator") else None,
            now_micros=s.now_micros,
            raw=s,
        )


@dataclass(frozen=True)
class Holder:
    """One holder of a lock: its session (and the session's store), mode and token."""

    store: int
    session: int
    shared: bool
    token: FencingToken


@dataclass(frozen=True)
class LockState:
    """A lock's holders and the sessions queued for it (oldest first)."""

    name: str
    holders: List[Holder]
    waiters: List[int]

    @classmethod
    def _from_proto(cls, h: Any) -> "LockState":
        return cls(
            name=h.name,
            holders=[
                Holder(
                    store=x.session.store,
                    session=x.session.id,
                    shared=x.mode == pb.LOCK_MODE_SHARED,
                    token=FencingToken._from_proto(x.token),
                )
                for x in h.holders
            ],
            waiters=[w.id for w in h.waiters],
        )


@dataclass(frozen=True)
class ObjectInfo:
    """An active object's description. ``revision`` is the store's revision at which this
    content became active (use it for compare-and-set)."""

    key: str
    revision: int
    uuid: str
    size: int
    checksum: int
    owner_session: Optional[int] = None
    blocks: int = 0

    @classmethod
    def _from_proto(cls, m: Any) -> "ObjectInfo":
        return cls(
            key=m.key,
            revision=m.revision,
            uuid=m.uuid,
            size=m.size,
            checksum=m.checksum,
            owner_session=m.owner_session if m.HasField("owner_session") else None,
            blocks=m.blocks,
        )


@dataclass(frozen=True)
class Object:
    """An object with its content: ``value`` (bytes) and its :class:`ObjectInfo`."""

    info: ObjectInfo
    value: bytes = field(repr=False)

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def revision(self) -> int:
        return self.info.revision

    @property
    def uuid(self) -> str:
        return self.info.uuid

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def checksum(self) -> int:
        return self.info.checksum

    @property
    def owner_session(self) -> Optional[int]:
        return self.info.owner_session

    def text(self, encoding: str = "utf-8") -> str:
        """The content decoded as text."""
        return self.value.decode(encoding)


@dataclass(frozen=True)
class ObjectWritten:
    """A write that took effect: the revision at which the content became active (or,
    for a delete, the revision of the deletion)."""

    key: str
    revision: int
    uuid: str = ""


@dataclass(frozen=True)
class Listing:
    """Objects at a prefix, in key order, and the store revision they were read at
    (watch from it: ``objects.watch(prefix, after=listing.revision)``). A listing of
    ``"/"`` across every store has ``revision`` ``None`` and one entry per store in
    ``revisions``."""

    objects: List[ObjectInfo]
    revision: Optional[int]
    revisions: Dict[int, int]

    def __iter__(self) -> Iterator[ObjectInfo]:
        return iter(self.objects)

    def __len__(self) -> int:
        return len(self.objects)

    def keys(self) -> List[str]:
        """The keys listed."""
        return [o.key for o in self.objects]


@dataclass(frozen=True)
class ObjectChange:
    """One change an object watch delivers, in revision order. ``deleted`` for a deletion
    (by a client, or the end of an ephemeral object's session); otherwise a new content
    became active, described by ``uuid``/``size``/``checksum``, and carried in ``value``
    when the watch asked ``include_values`` and the content was small enough (else
    ``None``: get the key)."""

    revision: int
    key: str
    deleted: bool
    uuid: str = ""
    size: int = 0
    checksum: int = 0
    value: Optional[bytes] = field(default=None, repr=False)

    @classmethod
    def _from_proto(cls, c: Any) -> "ObjectChange":
        return cls(
            revision=c.revision,
            key=c.key,
            deleted=c.deleted,
            uuid=c.uuid,
            size=c.size,
            checksum=c.checksum,
            value=c.value if c.HasField("value") else None,
        )


@dataclass(frozen=True)
class Leader:
    """An election's leader: its value, fencing token, session and the revision at which
    its record was written."""

    name: str
    value: bytes
    token: FencingToken
    store: int
    session: int
    revision: int

    @classmethod
    def _from_proto(cls, l: Any) -> "Leader":
        return cls(
            name=l.name,
            value=l.value,
            token=FencingToken._from_proto(l.token),
            store=l.session.store,
            session=l.session.id,
            revision=l.revision,
        )


@dataclass(frozen=True)
class LeaderChange:
    """Who leads an election from ``revision`` on (``leader`` ``None``: nobody)."""

    revision: int
    leader: Optional[Leader]


@dataclass(frozen=True)
class LookupEntry:
    """A lookup entry as the lookup leader has it. ``interval`` is the refresh interval
    its provider promised (seconds); ``age`` the time since its last refresh."""

    key: str
    value: bytes
    interval: float
    persistent: bool
    version: tuple
    age: float

    @classmethod
    def _from_proto(cls, e: Any) -> "LookupEntry":
        return cls(
            key=e.key,
            value=e.value,
            interval=e.interval_ms / 1000.0,
            persistent=e.durability == pb.DURABILITY_PERSISTENT,
            version=(e.version.stamp, e.version.provider),
            age=e.age_ms / 1000.0,
        )


@dataclass(frozen=True)
class LookupChange:
    """A change a lookup watch reports. ``kind`` is ``"put"`` (``entry`` appeared or
    changed), ``"removed"`` (``cause``: ``"revoked"``, ``"expired"``, or ``"resync"``
    when a resynchronisation found it gone) or ``"alert"``."""

    kind: str
    key: str
    entry: Optional[LookupEntry] = None
    cause: Optional[str] = None
    silent_for: Optional[float] = None
