"""The lookup service (sync): soft-state entries for service discovery.

Entries are soft state: a provider refreshes each entry within its interval, and an
entry not refreshed for two intervals (plus a round trip) disappears. ``publish`` does
the refreshing for you from one background thread until the entry is revoked (or the
client closed). Every device is a lookup node, so requests go to any endpoint.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

import grpc

from ._core import Stamper, to_bytes
from ._proto import tenure_pb2 as pb
from .errors import ClientClosed, DeadlineExceeded, TenureError, from_lookup_proto
from .types import LookupChange, LookupEntry

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

log = logging.getLogger("tenure.lookup")


def publish_request(key: str, value: bytes, version: Tuple[int, int], interval: float,
                    persistent: bool, adapt: Optional[Tuple[float, float]]) -> pb.PublishRequest:
    req = pb.PublishRequest(
        key=key, value=value,
        version=pb.EntryVersion(stamp=version[0], provider=version[1]),
        interval_ms=int(round(interval * 1000)),
        durability=pb.DURABILITY_PERSISTENT if persistent else pb.DURABILITY_VOLATILE)
    if adapt is not None:
        req.adapt_min_ms = int(round(adapt[0] * 1000))
        req.adapt_max_ms = int(round(adapt[1] * 1000))
    return req


class PublicationState:
    """A published entry's state, shared by the sync and asyncio refreshers."""

    def __init__(self, key: str, value: bytes, interval: float, persistent: bool,
                 adapt: Optional[Tuple[float, float]]) -> None:
        self.key = key
        self.value = value
        self.interval = interval
        self.persistent = persistent
        self.adapt = adapt
        self.stamper = Stamper()
        self.version: Tuple[int, int] = (0, 0)
        self.healthy = False
        self.last_error: Optional[str] = None
        self.refreshes = 0
        self.next_at = 0.0
        self.revoked = False
        self.failures = 0

    def request(self) -> pb.PublishRequest:
        self.version = self.stamper.next()
        return publish_request(self.key, self.value, self.version, self.interval,
                               self.persistent, self.adapt)

    def answered(self, ok: Any, now: float) -> None:
        """Apply a publish answer: its meta-update, and when the next refresh is due (the
        shorter of the old and the new interval)."""
        old = self.interval
        if ok.HasField("meta"):
            m = ok.meta
            if m.interval_ms:
                self.interval = m.interval_ms / 1000.0
            self.persistent = m.durability == pb.DURABILITY_PERSISTENT
        acked = ok.acked or not self.persistent
        self.healthy = acked
        self.last_error = None
        self.failures = 0
        self.refreshes += 1
        # Refresh a little before the interval ends (the entry lives two intervals).
        self.next_at = now + (min(old, self.interval) * 0.8 if acked else 0.05)

    def failed(self, e: TenureError, now: float) -> None:
        self.last_error = str(e)
        self.failures += 1
        if self.persistent:
            self.healthy = False
            self.next_at = now + min(1.0, 0.05 * (2 ** min(self.failures, 5)))
        else:
            # Optimistic: the next refresh is the retry (the entry outlives one loss).
            self.next_at = now + min(self.interval * 0.5, 0.25 * self.failures)

    def revoke_request(self) -> pb.RevokeRequest:
        self.version = self.stamper.next()
        return pb.RevokeRequest(
            key=self.key, version=pb.EntryVersion(stamp=self.version[0], provider=self.version[1]),
            durability=pb.DURABILITY_PERSISTENT if self.persistent else pb.DURABILITY_VOLATILE)


class Lookup:
    """The lookup service API of a :class:`~tenure.Client` (``client.lookup``)."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._pubs: List["Publication"] = []
        self._watches: List["LookupWatch"] = []
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    # -- queries -------------------------------------------------------------------------

    def get(self, key: str) -> Optional[LookupEntry]:
        """The entry under ``key`` as the lookup leader has it, or ``None``."""
        r = self._c._t.call("lookup", "Get", pb.GetRequest(key=key))
        return LookupEntry._from_proto(r.entry) if r.HasField("entry") else None

    def list(self, prefix: str = "/") -> List[LookupEntry]:
        """The entries at and under ``prefix`` (``"/"``: all), in key order."""
        r = self._c._t.call("lookup", "List", pb.ListRequest(prefix=prefix))
        return [LookupEntry._from_proto(e) for e in r.entries]

    def revoke(self, key: str) -> None:
        """Remove an entry, whoever published it (a provider that keeps refreshing it
        brings it back). Stop a publication of this client with
        :meth:`Publication.revoke` instead."""
        with self._cond:
            for p in self._pubs:
                if p.key == key:
                    break
            else:
                p = None
        if p is not None:
            p.revoke()
            return
        v = Stamper().next()
        req = pb.RevokeRequest(key=key, version=pb.EntryVersion(stamp=v[0], provider=v[1]),
                               durability=pb.DURABILITY_PERSISTENT)
        self._c._t.call("lookup", "Revoke", req)

    # -- publishing ----------------------------------------------------------------------

    def publish(self, key: str, value: Union[bytes, str], *, interval: float = 1.0,
                persistent: bool = False,
                adapt: Optional[Tuple[float, float]] = None) -> "Publication":
        """Publish ``key → value`` and keep it refreshed in the background every
        ``interval`` seconds (volatile entries: at most the service's maximum, 2 s by
        default) until revoked or the client closes. ``persistent`` entries are
        acknowledged by the lookup leader and survive full restarts. ``adapt=(min,
        max)`` accepts the service's meta-updates to any interval in that range.

        Returns once the first publish was answered (a persistent one acknowledged), a
        :class:`Publication` (a context manager that revokes on exit).
        """
        if self._closed:
            raise ClientClosed("the client is closed")
        st = PublicationState(key, to_bytes(value), float(interval), persistent, adapt)
        ok = self._c._t.call("lookup", "Publish", st.request())
        st.answered(ok, time.monotonic())
        if persistent and not ok.acked:
            st.next_at = time.monotonic()
        p = Publication(self, st)
        with self._cond:
            self._pubs.append(p)
            if self._thread is None:
                self._thread = threading.Thread(target=self._refresh_loop,
                                                name="tenure-lookup-refresh", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return p

    def _refresh_loop(self) -> None:
        t = self._c._t
        while True:
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                due = [p for p in self._pubs if p._st.next_at <= now]
                if not due:
                    wake = min((p._st.next_at for p in self._pubs), default=now + 1.0)
                    self._cond.wait(max(0.0, min(wake - now, 1.0)))
                    continue
            for p in due:
                st = p._st
                with p._lock:
                    if st.revoked:
                        continue
                    req = st.request()
                try:
                    # A refresh may take up to its interval (then the next is due anyway).
                    ok = t.call("lookup", "Publish", req, deadline=max(st.interval, 0.5),
                                attempt_timeout=max(st.interval, 0.5))
                    with p._lock:
                        st.answered(ok, time.monotonic())
                except ClientClosed:
                    return
                except TenureError as e:
                    log.debug("refresh of %s failed: %s", st.key, e)
                    with p._lock:
                        st.failed(e, time.monotonic())

    def _remove(self, p: "Publication") -> None:
        with self._cond:
            if p in self._pubs:
                self._pubs.remove(p)

    def _close(self) -> None:
        with self._cond:
            pubs, self._pubs = list(self._pubs), []
            watches, self._watches = list(self._watches), []
        for p in pubs:
            try:
                p._revoke(deadline=2.0)
            except TenureError:
                pass
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for w in watches:
            w.close()

    # -- watching ------------------------------------------------------------------------

    def watch(self, prefix: str, *, interval: float = 1.0) -> "LookupWatch":
        """Watch the entries at and under ``prefix``: an iterator of
        :class:`~tenure.LookupChange`. The first changes are the entries present (one
        ``"put"`` each); then every change in the leader's order. Survives a lookup
        failover or a device going down (the view is resynchronised: nothing disappears
        silently). ``interval`` is the subscription's refresh interval."""
        w = LookupWatch(self._c, ("prefix", prefix), interval)
        with self._cond:
            self._watches.append(w)
        w._start()
        return w

    def alert(self, key: str, within: float, *, interval: float = 1.0) -> "LookupWatch":
        """Be alerted whenever ``key`` goes ``within`` seconds without a refresh: one
        ``"alert"`` :class:`~tenure.LookupChange` per silence."""
        w = LookupWatch(self._c, ("alert", key, within), interval)
        with self._cond:
            self._watches.append(w)
        w._start()
        return w


class Publication:
    """A published lookup entry, refreshed in the background. A context manager that
    revokes the entry on exit.

    Attributes:
        key: the entry's key.
    """

    def __init__(self, lookup: Lookup, st: PublicationState) -> None:
        self._lookup = lookup
        self._st = st
        self._lock = threading.Lock()
        self.key = st.key

    def __repr__(self) -> str:
        return f"<tenure.Publication {self.key!r} interval={self.interval} healthy={self.healthy}>"

    @property
    def value(self) -> bytes:
        return self._st.value

    @property
    def interval(self) -> float:
        """The refresh interval in use (a meta-update may have changed it)."""
        return self._st.interval

    @property
    def persistent(self) -> bool:
        return self._st.persistent

    @property
    def healthy(self) -> bool:
        """Whether the last refresh went out (volatile) or was acknowledged (persistent)."""
        return self._st.healthy and not self._st.revoked

    @property
    def last_error(self) -> Optional[str]:
        """The last refresh's error, if it failed."""
        return self._st.last_error

    @property
    def refreshes(self) -> int:
        return self._st.refreshes

    def update(self, value: Union[bytes, str]) -> None:
        """Change the value: published at once (and by every refresh after)."""
        with self._lock:
            self._st.value = to_bytes(value)
            self._st.next_at = 0.0
        with self._lookup._cond:
            self._lookup._cond.notify_all()

    def revoke(self) -> None:
        """Stop refreshing and revoke the entry."""
        self._revoke(deadline=None)

    def _revoke(self, deadline: Optional[float]) -> None:
        with self._lock:
            if self._st.revoked:
                return
            self._st.revoked = True
            req = self._st.revoke_request()
        self._lookup._remove(self)
        self._lookup._c._t.call("lookup", "Revoke", req, deadline=deadline)

    def __enter__(self) -> "Publication":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            self.revoke()
        except TenureError:
            if exc_type is None:
                raise


class Subscription:
    """A lookup subscription's view and position (no I/O), shared by both watchers:
    turns the leader's events into :class:`~tenure.LookupChange`; a gap (a lost event)
    asks for a resynchronisation."""

    def __init__(self, watch: tuple, interval: float) -> None:
        self.id = random.getrandbits(63) | 1
        self.watch = watch
        self.interval = interval
        self.view: Dict[str, LookupEntry] = {}
        self.pos: Optional[Tuple[Tuple[int, int], int]] = None

    @property
    def is_alert(self) -> bool:
        return self.watch[0] == "alert"

    def subscribe(self, request_id: int) -> pb.WatchRequest:
        sub = pb.Subscribe(sub=self.id, interval_ms=int(round(self.interval * 1000)))
        if self.watch[0] == "prefix":
            sub.prefix = self.watch[1]
        else:
            sub.alert.key = self.watch[1]
            sub.alert.within_ms = int(round(self.watch[2] * 1000))
        if self.pos is not None:
            (start, device), seq = self.pos
            sub.position.leader.start_micros = start
            sub.position.leader.device = device
            sub.position.seq = seq
        return pb.WatchRequest(request_id=request_id, subscribe=sub)

    def apply(self, ev: Any) -> Tuple[List[LookupChange], bool]:
        """One pushed event: the changes it makes, and whether to resubscribe for a sync."""
        leader = (ev.leader.start_micros, ev.leader.device)
        here = (leader, ev.seq)
        kind = ev.WhichOneof("event")
        out: List[LookupChange] = []
        if kind == "sync":
            nxt: Dict[str, LookupEntry] = {}
            for e in ev.sync.entries:
                entry = LookupEntry._from_proto(e)
                old = self.view.get(entry.key)
                if old is None or old.version != entry.version or old.value != entry.value:
                    out.append(LookupChange("put", entry.key, entry=entry))
                nxt[entry.key] = entry
            for key in self.view:
                if key not in nxt:
                    out.append(LookupChange("removed", key, cause="resync"))
            self.view = nxt
            self.pos = here
            return out, False
        if not self.is_alert:
            if self.pos is None:
                return out, False  # waiting for a sync
            (pl, pseq) = self.pos
            if pl == leader and ev.seq <= pseq:
                return out, False  # a duplicate
            if not (pl == leader and ev.seq == pseq + 1):
                self.pos = None
                return out, True  # a gap: ask for a sync
        self.pos = here
        if kind == "put":
            entry = LookupEntry._from_proto(ev.put)
            old = self.view.get(entry.key)
            self.view[entry.key] = entry
            if old is None or old.version != entry.version or old.value != entry.value:
                out.append(LookupChange("put", entry.key, entry=entry))
        elif kind == "removed":
            if self.view.pop(ev.removed.key, None) is not None:
                out.append(LookupChange("removed", ev.removed.key, cause=ev.removed.cause))
        elif kind == "alert":
            out.append(LookupChange("alert", ev.alert.key,
                                    silent_for=ev.alert.silent_for_ms / 1000.0))
        return out, False


_END = object()
_STOP = object()


class LookupWatch:
    """A running lookup watch (or alert): iterate it for :class:`~tenure.LookupChange`;
    :meth:`next` with a timeout; :meth:`close` to stop. :attr:`view` is the entries
    currently seen (key → :class:`~tenure.LookupEntry`)."""

    def __init__(self, client: "Client", watch: tuple, interval: float) -> None:
        self._c = client
        self._sub = Subscription(watch, interval)
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._closed = threading.Event()
        self._call: Any = None
        self._thread: Optional[threading.Thread] = None
        self._done = False
        self._req_id = 0
        self._outbox: "queue.Queue[Any]" = queue.Queue()

    @property
    def view(self) -> Dict[str, LookupEntry]:
        return dict(self._sub.view)

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tenure-lookup-watch", daemon=True)
        self._thread.start()

    def _next_id(self) -> int:
        self._req_id += 1
        return self._req_id

    def _requests(self, outbox: "queue.Queue[Any]") -> Iterator[pb.WatchRequest]:
        yield self._sub.subscribe(self._next_id())
        while not self._closed.is_set():
            try:
                item = outbox.get(timeout=self._sub.interval)
            except queue.Empty:
                yield self._sub.subscribe(self._next_id())  # the soft-state refresh
                continue
            if item is _STOP:
                return
            yield item

    def _run(self) -> None:
        from ._core import Plan
        t = self._c._t
        plan = Plan(t.router, self._c.options)
        while not self._closed.is_set():
            target = plan.target
            outbox: "queue.Queue[Any]" = queue.Queue()
            self._outbox = outbox
            subscribed = False
            err: Optional[TenureError] = None
            try:
                call = t.stub(target, "lookup").Watch(self._requests(outbox), metadata=t.metadata)
                self._call = call
                if self._closed.is_set():
                    call.cancel()
                    return
                for m in call:
                    kind = m.WhichOneof("kind")
                    if kind == "subscribed":
                        if not subscribed:
                            subscribed = True
                            t.router.succeeded(target)
                            plan = Plan(t.router, self._c.options)
                            plan.target = target
                    elif kind == "event":
                        if m.event.sub != self._sub.id:
                            continue
                        changes, resync = self._sub.apply(m.event)
                        for ch in changes:
                            self._q.put(ch)
                        if resync:
                            outbox.put(self._sub.subscribe(self._next_id()))
                    elif kind == "error":
                        e = from_lookup_proto(m.error)
                        if not e.retryable:
                            self._fail(e)
                            return
                err = DeadlineExceeded("the lookup watch stream ended", endpoint=target)
            except grpc.RpcError as e:
                if self._closed.is_set():
                    return
                err = t.rpc_error(e, target)
            finally:
                outbox.put(_STOP)
            if not err.retryable:
                self._fail(err)
                return
            try:
                delay = plan.failed(err)
            except TenureError as e:
                self._fail(e)
                return
            if self._closed.wait(delay):
                return

    def _fail(self, e: BaseException) -> None:
        self._q.put(e)
        self._q.put(_END)

    def __iter__(self) -> "LookupWatch":
        return self

    def __next__(self) -> LookupChange:
        return self._take(None)

    def next(self, timeout: Optional[float] = None) -> LookupChange:
        """The next change, waiting at most ``timeout`` seconds (:class:`TimeoutError`)."""
        return self._take(timeout)

    def _take(self, timeout: Optional[float]) -> LookupChange:
        if self._done:
            raise StopIteration
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no lookup change within {timeout} s") from None
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def close(self) -> None:
        """Stop watching (the subscription lapses at the nodes)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._outbox.put(pb.WatchRequest(request_id=self._next_id(),
                                         unsubscribe=pb.Unsubscribe(sub=self._sub.id)))
        self._outbox.put(_STOP)
        if self._call is not None:
            self._call.cancel()
        self._q.put(_END)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def __enter__(self) -> "LookupWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

