"""The asyncio client: :class:`Client`, :class:`Session` and :class:`Lock` (on
``grpc.aio``), the same shape as :mod:`tenure`'s blocking API."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from typing import Any, Awaitable, Callable, Dict, Generator, Generic, Iterable, List, Optional, TypeVar, Union

from .. import _core
from .._core import Credentials, Options, StoreCache, parse_endpoints
from .._proto import tenure_pb2 as pb
from .._sessions import AsyncSessionDriver
from ..client import PathLike, _cluster_settings
from ..errors import (
    ClientClosed,
    GrantUnconfirmed,
    NotHeld,
    SessionExpired,
    SessionLost,
    TenureError,
    Timeout,
    WouldBlock,
)
from ..types import DeviceStatus, FencingToken, LockState, Resolved
from ._transport import AsyncTransport

log = logging.getLogger("tenure")

T = TypeVar("T")


class Pending(Generic[T]):
    """What calls that make a held thing return (a lock, a leadership, a publication, a
    watch): await it for the thing, or use it as an async context manager, which also
    ends the thing on exit::

        lock = await s.lock("/x")          # release with await lock.release()
        async with s.lock("/x") as lock:   # released on exit
            ...
    """

    def __init__(self, make: Callable[[], Awaitable[T]]) -> None:
        self._make = make
        self._value: Optional[T] = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._make().__await__()

    async def __aenter__(self) -> T:
        self._value = await self._make()
        return await self._value.__aenter__()  # type: ignore[attr-defined]

    async def __aexit__(self, *exc: Any) -> Any:
        assert self._value is not None
        return await self._value.__aexit__(*exc)  # type: ignore[attr-defined]


def call_back(cb: Optional[Callable[[Any], Any]], arg: Any, what: str) -> None:
    """Run a user's loss callback: a coroutine function runs as a task."""
    if cb is None:
        return
    try:
        r = cb(arg)
        if inspect.isawaitable(r):
            task = asyncio.ensure_future(r)
            task.add_done_callback(lambda t: t.cancelled() or t.exception() and log.error(
                "the on_lost callback of %s raised: %r", what, t.exception()))
    except Exception:
        log.exception("the on_lost callback of %s raised", what)


class Client:
    """A Tenure client for asyncio. The arguments are those of :class:`tenure.Client`.

    Use it as ``async with tenure.aio.Client(...) as c:``, or ``await c.close()``.
    Connections are made on first use, in the running event loop.
    """

    def __init__(self, endpoints: Union[None, str, Iterable[str]] = None, *,
                 tls_ca: Any = None, tls_cert: Any = None, tls_key: Any = None,
                 tls_server_name: Optional[str] = None, token: Optional[str] = None,
                 deadline: Optional[float] = None, options: Optional[Options] = None) -> None:
        raw = endpoints if endpoints is not None else os.environ.get("TENURE_ENDPOINTS")
        eps = parse_endpoints(endpoints)
        opts = Options(**vars(options)) if options is not None else Options()
        if deadline is not None:
            opts.deadline = float(deadline)
        self.options = opts
        creds = Credentials.make(endpoints=eps, raw_endpoints=raw, tls_ca=tls_ca,
                                 tls_cert=tls_cert, tls_key=tls_key,
                                 tls_server_name=tls_server_name, token=token)
        self._t = AsyncTransport(eps, creds, opts)
        self._stores = StoreCache()
        self._sessions: List["Session"] = []
        self._writer: Optional["Session"] = None
        self._closed = False
        from .elections import Elections
        from .lookup import Lookup
        from .objects import Objects
        self.objects = Objects(self)
        self.elections = Elections(self)
        self.lookup = Lookup(self)

    @classmethod
    def from_cluster(cls, data_dir: PathLike = "tenure-data", **kwargs: Any) -> "Client":
        """A client of a local cluster (see :meth:`tenure.Client.from_cluster`)."""
        settings = _cluster_settings(data_dir)
        settings.update(kwargs)
        return cls(**settings)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the sessions made by this client, revoke its publications, stop its
        watches, and close the connections."""
        if self._closed:
            return
        self._closed = True
        sessions = list(self._sessions)
        if self._writer is not None:
            sessions.append(self._writer)
        await self.lookup._close()
        await self.objects._close()
        await self.elections._close()
        for s in sessions:
            try:
                await s.close()
            except TenureError as e:  # pragma: no cover
                log.debug("closing a session failed: %s", e)
        await self._t.close()

    @property
    def endpoints(self) -> List[str]:
        return list(self._t.router.endpoints)

    def session(self, ttl: Optional[float] = None, *,
                on_lost: Optional[Callable[["Session"], Any]] = None) -> "Session":
        """A new session (see :meth:`tenure.Client.session`); ``async with`` it, or
        ``await session.close()``. Opens on first use (one ``OpenSession``; the server picks its
        home store)."""
        if self._closed:
            raise ClientClosed("the client is closed")
        s = Session(self, ttl if ttl is not None else self.options.session_ttl, on_lost)
        self._sessions.append(s)
        return s

    def _forget(self, s: "Session") -> None:
        if s in self._sessions:
            self._sessions.remove(s)

    def _writer_session(self) -> "Session":
        if self._closed:
            raise ClientClosed("the client is closed")
        if self._writer is None or self._writer.lost.is_set():
            self._writer = Session(self, self.options.session_ttl, None)
        return self._writer

    async def resolve(self, name: str) -> Resolved:
        """Where ``name`` lives (see :meth:`tenure.Client.resolve`)."""
        r = await self._t.call("tenure", "Resolve", pb.ResolveRequest(name=name))
        res = Resolved._from_proto(r)
        self._stores.put(name, res.store)
        return res

    async def store_of(self, name: str) -> int:
        """The store ``name`` lives in."""
        s = self._stores.get(name)
        if s is not None:
            return s
        return (await self.resolve(name)).store

    async def status(self, endpoint: Optional[str] = None) -> DeviceStatus:
        """One device's status (see :meth:`tenure.Client.status`)."""
        if endpoint is not None:
            ep = _core.normalize_endpoint(endpoint)
            r = await self._t.invoke(ep, "tenure", "Status", pb.StatusRequest(),
                                     self.options.attempt_timeout, collect=lambda x: x)
            return DeviceStatus._from_proto(ep, r)
        r, ep = await self._t.call("tenure", "Status", pb.StatusRequest(), collect=lambda x: x,
                                   with_endpoint=True)
        return DeviceStatus._from_proto(ep, r)

    async def holders(self, name: str) -> LockState:
        """Who holds lock ``name`` and who waits for it."""
        return LockState._from_proto(
            await self._t.call("tenure", "Holder", pb.HolderRequest(name=name)))

    async def locks(self, prefix: str, *, store: Optional[int] = None,
                    limit: int = 0) -> List[LockState]:
        """Locks at and under ``prefix`` (see :meth:`tenure.Client.locks`)."""
        if prefix == "/" and store is None:
            stores: List[Optional[int]] = list(range((await self.status()).stores))
        else:
            stores = [store]
        out: List[LockState] = []
        for s in stores:
            req = pb.ListLocksRequest(prefix=prefix, limit=limit)
            if s is not None:
                req.store = s
            r = await self._t.call("tenure", "ListLocks", req)
            out.extend(LockState._from_proto(e) for e in r.locks)
        return sorted(out, key=lambda l: l.name)


class Session:
    """A session (see :class:`tenure.Session`); :attr:`lost` is an :class:`asyncio.Event`.
    ``on_lost`` may be a plain function or a coroutine function."""

    def __init__(self, client: Client, ttl: float,
                 on_lost: Optional[Callable[["Session"], Any]]) -> None:
        self._client = client
        self.ttl = float(ttl)
        self.lost = asyncio.Event()
        self._on_lost = on_lost
        self._locks: List["Lock"] = []
        self._holders: List[Any] = []
        self._driver = AsyncSessionDriver(client._t, self.ttl, self._lost)

    @property
    def lost_reason(self) -> Optional[str]:
        return self._driver.lost_reason

    @property
    def id(self) -> Optional[int]:
        """The session's id (in its home store :attr:`store`); ``None`` before it opened."""
        home = self._driver.home
        return home.id if home is not None else None

    @property
    def store(self) -> Optional[int]:
        """The session's home store (the server's choice); ``None`` before it opened."""
        home = self._driver.home
        return home.store if home is not None else None

    @property
    def safe_until(self) -> Optional[float]:
        return self._driver.safe_until()

    @property
    def alive(self) -> bool:
        until = self.safe_until
        return (not self.lost.is_set() and not self._driver.closed
                and (until is None or time.monotonic() < until))

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "closed" if self._driver.closed else "alive"
        return f"<tenure.aio.Session ttl={self.ttl} {state} store={self.store} id={self.id}>"

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session (its locks in every store released, ephemeral objects
        deleted)."""
        await self._driver.close()
        locks, self._locks = self._locks, []
        holders, self._holders = self._holders, []
        for l in locks:
            l._released = True
        for h in holders:
            h._ended = True
        self._client._forget(self)

    def _lost(self, reason: str) -> None:
        self.lost.set()
        for l in list(self._locks):
            l._mark_lost(reason)
        for h in list(self._holders):
            h._mark_lost(reason)
        call_back(self._on_lost, self, "the session")

    async def _ref(self) -> pb.SessionRef:
        """The session's ref for a request of any store (opens it on first use)."""
        return await self._driver.ref()

    def _home(self) -> pb.SessionRef:
        """The session's ref, without checks (releases and resigns of what it holds)."""
        home = self._driver.home
        assert home is not None, "the session holds nothing before it opened"
        return home

    def _next_id(self) -> int:
        return self._driver.next_request_id()

    def _cancel(self) -> Optional[Exception]:
        if self._driver.lost:
            return SessionLost(f"the session is lost: {self._driver.lost_reason}")
        if self._driver.closed:
            return ClientClosed("the session is closed")
        return None

    def _raise_expired(self, e: SessionExpired) -> None:
        self._driver.expired(e.message)
        raise SessionLost(f"the session is lost: {e.message}") from e

    async def _confirm(self, name: str, release: Callable[[], Awaitable[Any]]) -> None:
        until = self.safe_until
        warn = min(2.0, self.ttl / 2)
        if until is not None and until - time.monotonic() > warn and not self.lost.is_set():
            return
        limit = min(max(self.ttl / 3, 1.0), self._client.options.attempt_timeout)
        if not self.lost.is_set() and await self._driver.confirm(limit):
            until = self.safe_until
            if until is not None and until - time.monotonic() > warn:
                return
        try:
            await release()
        except TenureError:
            pass
        if self.lost.is_set():
            raise SessionLost(f"the session is lost: {self.lost_reason}")
        raise GrantUnconfirmed(
            f"{name} was granted too close to the session's deadline to be safe and was "
            "released", name=name)

    def lock(self, name: str, *, shared: bool = False, timeout: Optional[float] = None,
             lock_delay: Optional[float] = None,
             on_lost: Optional[Callable[["Lock"], Any]] = None) -> "Pending[Lock]":
        """Acquire lock ``name`` (see :meth:`tenure.Session.lock`): ``await`` it for the
        :class:`Lock`, or ``async with s.lock(name) as lock:``."""
        async def make() -> Lock:
            lock = await self._acquire(name, shared=shared, timeout=timeout, no_wait=False,
                                       lock_delay=lock_delay, on_lost=on_lost)
            assert lock is not None
            return lock
        return Pending(make)

    async def try_lock(self, name: str, *, shared: bool = False,
                       lock_delay: Optional[float] = None,
                       on_lost: Optional[Callable[["Lock"], Any]] = None) -> Optional["Lock"]:
        """Acquire lock ``name`` if it is free now: the :class:`Lock`, or ``None``."""
        return await self._acquire(name, shared=shared, timeout=None, no_wait=True,
                                   lock_delay=lock_delay, on_lost=on_lost)

    async def _acquire(self, name: str, *, shared: bool, timeout: Optional[float],
                       no_wait: bool, lock_delay: Optional[float],
                       on_lost: Optional[Callable[["Lock"], Any]]) -> Optional["Lock"]:
        client = self._client
        opts = client.options
        store = await client.store_of(name)
        ref = await self._ref()
        req = pb.AcquireRequest(
            session=ref, name=name,
            mode=pb.LOCK_MODE_SHARED if shared else pb.LOCK_MODE_EXCLUSIVE,
            no_wait=no_wait, request_id=self._next_id())
        if lock_delay is not None:
            req.lock_delay_ms = int(round(lock_delay * 1000))
        if no_wait:
            kwargs: Dict[str, Any] = {}
        elif timeout is not None:
            # One call carrying the wait: the server grants the lock when it is freed, or
            # answers Timeout once timeout_ms passed. It is sent again (same request id:
            # the same place in the queue) only after a failure (a failover, a device
            # gone), and the whole call ends within the wait and one attempt more.
            req.timeout_ms = max(1, int(round(timeout * 1000)))
            bound = timeout + opts.attempt_timeout
            kwargs = {"deadline": bound, "attempt_timeout": bound}
        else:
            kwargs = {"deadline": float("inf"), "attempt_timeout": opts.wait_poll,
                      "cut_ok": True}
        try:
            granted = await client._t.call("tenure", "Acquire", req, cancel=self._cancel,
                                           **kwargs)
        except WouldBlock:
            if no_wait:
                return None
            raise
        except SessionExpired as e:
            self._raise_expired(e)
            raise  # pragma: no cover
        except Timeout:
            raise
        except TenureError as e:
            if timeout is not None and not no_wait and e.retryable:
                what = "timed out" if name in e.message else f"timed out waiting for {name}"
                raise Timeout(f"{what} ({e.message})", name=name) from e
            raise
        lock = Lock(self, name, store, ref.id, shared, FencingToken._from_proto(granted.token),
                    on_lost)
        self._locks.append(lock)
        await self._confirm(name, lambda: lock._release(quiet=True))
        if self.lost.is_set():
            lock._mark_lost(self.lost_reason or "session lost")
        return lock

    async def _release(self, lock: "Lock") -> None:
        # The session's own ref (home store and id), whatever the lock's store.
        req = pb.ReleaseRequest(session=self._home(), name=lock.name, request_id=self._next_id(),
                                token=lock.token._to_proto())
        try:
            await self._client._t.call("tenure", "Release", req)
        finally:
            if lock in self._locks:
                self._locks.remove(lock)

    def election(self, name: str) -> Any:
        """Election ``name`` for this session (:class:`tenure.aio.elections.Election`)."""
        from .elections import Election
        return Election(self, name)


class Lock:
    """A held lock (see :class:`tenure.Lock`); :attr:`lost` is an :class:`asyncio.Event`.
    ``async with`` releases it on exit; ``await lock.release()`` releases it now."""

    def __init__(self, session: Session, name: str, store: int, session_id: int, shared: bool,
                 token: FencingToken, on_lost: Optional[Callable[["Lock"], Any]]) -> None:
        self.session = session
        self.name = name
        self.store = store
        self.session_id = session_id
        self.shared = shared
        self.token = token
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._on_lost = on_lost
        self._released = False

    def __repr__(self) -> str:
        mode = "shared" if self.shared else "exclusive"
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<tenure.aio.Lock {self.name!r} {mode} token={self.token} {state}>"

    @property
    def safe_until(self) -> Optional[float]:
        return self.session.safe_until

    @property
    def held(self) -> bool:
        until = self.safe_until
        return (not self._released and not self.lost.is_set() and until is not None
                and time.monotonic() < until)

    def _mark_lost(self, reason: str) -> None:
        if self._released or self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        call_back(self._on_lost, self, f"lock {self.name}")

    async def release(self) -> None:
        """Release the lock (see :meth:`tenure.Lock.release`)."""
        await self._release(quiet=False)

    async def _release(self, quiet: bool) -> None:
        if self._released:
            return
        if self.lost.is_set():
            self._released = True
            if quiet:
                return
            raise SessionLost(f"lock {self.name} was lost: {self.lost_reason}")
        self._released = True
        try:
            await self.session._release(self)
        except (NotHeld, SessionExpired):
            pass
        except TenureError:
            if not quiet:
                raise

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self._release(quiet=exc_type is not None or self.lost.is_set())
