"""The lookup service for asyncio (see :mod:`tenure.lookup`)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Optional, Tuple, Union

import grpc

from .._core import Plan, Stamper, to_bytes
from .._proto import tenure_pb2 as pb
from ..errors import ClientClosed, DeadlineExceeded, TenureError, from_lookup_proto
from ..lookup import PublicationState, Subscription
from ..types import LookupChange, LookupEntry
from .client import Pending

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

log = logging.getLogger("tenure.lookup")


class Lookup:
    """The lookup service API of a :class:`tenure.aio.Client` (``client.lookup``)."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._pubs: List["Publication"] = []
        self._watches: List["LookupWatch"] = []
        self._task: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._closed = False

    async def get(self, key: str) -> Optional[LookupEntry]:
        """The entry under ``key``, or ``None``."""
        r = await self._c._t.call("lookup", "Get", pb.GetRequest(key=key))
        return LookupEntry._from_proto(r.entry) if r.HasField("entry") else None

    async def list(self, prefix: str = "/") -> List[LookupEntry]:
        """The entries at and under ``prefix``, in key order."""
        r = await self._c._t.call("lookup", "List", pb.ListRequest(prefix=prefix))
        return [LookupEntry._from_proto(e) for e in r.entries]

    async def revoke(self, key: str) -> None:
        """Remove an entry, whoever published it."""
        for p in self._pubs:
            if p.key == key:
                await p.revoke()
                return
        v = Stamper().next()
        req = pb.RevokeRequest(key=key, version=pb.EntryVersion(stamp=v[0], provider=v[1]),
                               durability=pb.DURABILITY_PERSISTENT)
        await self._c._t.call("lookup", "Revoke", req)

    def publish(self, key: str, value: Union[bytes, str], *, interval: float = 1.0,
                persistent: bool = False,
                adapt: Optional[Tuple[float, float]] = None) -> "Pending[Publication]":
        """Publish ``key → value``, refreshed in the background (see
        :meth:`tenure.lookup.Lookup.publish`): ``await`` it, or ``async with`` it (revokes
        on exit)."""
        async def make() -> Publication:
            if self._closed:
                raise ClientClosed("the client is closed")
            st = PublicationState(key, to_bytes(value), float(interval), persistent, adapt)
            ok = await self._c._t.call("lookup", "Publish", st.request())
            st.answered(ok, time.monotonic())
            if persistent and not ok.acked:
                st.next_at = time.monotonic()
            p = Publication(self, st)
            self._pubs.append(p)
            if self._task is None:
                self._wake = asyncio.Event()
                self._task = asyncio.get_running_loop().create_task(self._refresh_loop())
            self._poke()
            return p
        return Pending(make)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _refresh_loop(self) -> None:
        assert self._wake is not None
        t = self._c._t
        while not self._closed:
            now = time.monotonic()
            due = [p for p in self._pubs if p._st.next_at <= now]
            if not due:
                wake = min((p._st.next_at for p in self._pubs), default=now + 1.0)
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), max(0.0, min(wake - now, 1.0)))
                except asyncio.TimeoutError:
                    pass
                continue
            for p in due:
                st = p._st
                if st.revoked:
                    continue
                req = st.request()
                try:
                    ok = await t.call("lookup", "Publish", req, deadline=max(st.interval, 0.5),
                                      attempt_timeout=max(st.interval, 0.5))
                    st.answered(ok, time.monotonic())
                except ClientClosed:
                    return
                except TenureError as e:
                    log.debug("refresh of %s failed: %s", st.key, e)
                    st.failed(e, time.monotonic())

    def _remove(self, p: "Publication") -> None:
        if p in self._pubs:
            self._pubs.remove(p)

    async def _close(self) -> None:
        pubs, self._pubs = list(self._pubs), []
        for p in pubs:
            try:
                await p._revoke(deadline=2.0)
            except TenureError:
                pass
        self._closed = True
        self._poke()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        watches, self._watches = list(self._watches), []
        for w in watches:
            await w.close()

    def watch(self, prefix: str, *, interval: float = 1.0) -> "Pending[LookupWatch]":
        """Watch the entries at and under ``prefix`` (see
        :meth:`tenure.lookup.Lookup.watch`): ``await`` it or ``async with`` it."""
        async def make() -> LookupWatch:
            w = LookupWatch(self._c, ("prefix", prefix), interval)
            self._watches.append(w)
            w._start()
            return w
        return Pending(make)

    def alert(self, key: str, within: float, *, interval: float = 1.0) -> "Pending[LookupWatch]":
        """Be alerted whenever ``key`` goes ``within`` seconds without a refresh."""
        async def make() -> LookupWatch:
            w = LookupWatch(self._c, ("alert", key, within), interval)
            self._watches.append(w)
            w._start()
            return w
        return Pending(make)


class Publication:
    """A published entry, refreshed in the background (see
    :class:`tenure.lookup.Publication`)."""

    def __init__(self, lookup: Lookup, st: PublicationState) -> None:
        self._lookup = lookup
        self._st = st
        self.key = st.key

    def __repr__(self) -> str:
        return f"<tenure.aio.Publication {self.key!r} interval={self.interval}>"

    @property
    def value(self) -> bytes:
        return self._st.value

    @property
    def interval(self) -> float:
        return self._st.interval

    @property
    def persistent(self) -> bool:
        return self._st.persistent

    @property
    def healthy(self) -> bool:
        return self._st.healthy and not self._st.revoked

    @property
    def last_error(self) -> Optional[str]:
        return self._st.last_error

    @property
    def refreshes(self) -> int:
        return self._st.refreshes

    def update(self, value: Union[bytes, str]) -> None:
        """Change the value: published at once (and by every refresh after)."""
        self._st.value = to_bytes(value)
        self._st.next_at = 0.0
        self._lookup._poke()

    async def revoke(self) -> None:
        """Stop refreshing and revoke the entry."""
        await self._revoke(deadline=None)

    async def _revoke(self, deadline: Optional[float]) -> None:
        if self._st.revoked:
            return
        self._st.revoked = True
        req = self._st.revoke_request()
        self._lookup._remove(self)
        await self._lookup._c._t.call("lookup", "Revoke", req, deadline=deadline)

    async def __aenter__(self) -> "Publication":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            await self.revoke()
        except TenureError:
            if exc_type is None:
                raise


_END = object()
_STOP = object()


class LookupWatch:
    """A running lookup watch: ``async for change in watch``; :meth:`next` with a
    timeout; :meth:`close` to stop."""

    def __init__(self, client: "Client", watch: tuple, interval: float) -> None:
        self._c = client
        self._sub = Subscription(watch, interval)
        self._q: "asyncio.Queue[Any]" = asyncio.Queue()
        self._task: Optional[asyncio.Task] = None
        self._call: Any = None
        self._closed = False
        self._done = False
        self._req_id = 0
        self._outbox: "asyncio.Queue[Any]" = asyncio.Queue()

    @property
    def view(self) -> Dict[str, LookupEntry]:
        return dict(self._sub.view)

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _next_id(self) -> int:
        self._req_id += 1
        return self._req_id

    async def _requests(self, outbox: "asyncio.Queue[Any]") -> AsyncIterator[pb.WatchRequest]:
        yield self._sub.subscribe(self._next_id())
        while not self._closed:
            try:
                item = await asyncio.wait_for(outbox.get(), self._sub.interval)
            except asyncio.TimeoutError:
                yield self._sub.subscribe(self._next_id())
                continue
            if item is _STOP:
                return
            yield item

    async def _run(self) -> None:
        t = self._c._t
        plan = Plan(t.router, self._c.options)
        while not self._closed:
            target = plan.target
            outbox: "asyncio.Queue[Any]" = asyncio.Queue()
            self._outbox = outbox
            subscribed = False
            err: TenureError
            try:
                call = t.stub(target, "lookup").Watch(self._requests(outbox), metadata=t.metadata)
                self._call = call
                async for m in call:
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
                            self._q.put_nowait(ch)
                        if resync:
                            outbox.put_nowait(self._sub.subscribe(self._next_id()))
                    elif kind == "error":
                        e = from_lookup_proto(m.error)
                        if not e.retryable:
                            self._fail(e)
                            return
                err = DeadlineExceeded("the lookup watch stream ended", endpoint=target)
            except grpc.RpcError as e:
                if self._closed:
                    return
                err = t.rpc_error(e, target)
            finally:
                outbox.put_nowait(_STOP)
            if not err.retryable:
                self._fail(err)
                return
            try:
                delay = plan.failed(err)
            except TenureError as e:
                self._fail(e)
                return
            await asyncio.sleep(delay)

    def _fail(self, e: BaseException) -> None:
        self._q.put_nowait(e)
        self._q.put_nowait(_END)

    def __aiter__(self) -> "LookupWatch":
        return self

    async def __anext__(self) -> LookupChange:
        return await self.next()

    async def next(self, timeout: Optional[float] = None) -> LookupChange:
        """The next change, waiting at most ``timeout`` seconds (:class:`TimeoutError`)."""
        if self._done:
            raise StopAsyncIteration
        try:
            item = await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no lookup change within {timeout} s") from None
        if item is _END:
            self._done = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    async def close(self) -> None:
        """Stop watching."""
        if self._closed:
            return
        self._closed = True
        self._outbox.put_nowait(pb.WatchRequest(request_id=self._next_id(),
                                                unsubscribe=pb.Unsubscribe(sub=self._sub.id)))
        self._outbox.put_nowait(_STOP)
        if self._call is not None:
            self._call.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._q.put_nowait(_END)

    async def __aenter__(self) -> "LookupWatch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
