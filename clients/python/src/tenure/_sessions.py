"""Per-store sessions behind one user session.

The server keeps sessions per store today (``OpenSession{store, ttl_ms}``; a lock name or
object key lives in the store ``Resolve(name).store`` names). A user's
:class:`tenure.Session` is one object whatever stores its names live in: underneath, this
module opens one store session lazily for each store the user touches and keeps them all
alive from ONE background loop (a thread for the sync client, a task for the asyncio
one), a keep-alive per store every TTL/3 on a one-shot ``KeepAlive`` stream.

The deadline rule: a store session is safe until the *send* time of its last keep-alive
answered alive (or of its ``OpenSession``) + the TTL answered − δ_c (the cluster's clock
drift bound). The manager sets its own deadline on receipt, on a clock at most δ_c away,
so the client's deadline never falls after the manager's. The user's session is lost —
once, for good — when any keep-alive answers ``SessionExpired``, or when any store
session's deadline passes without a keep-alive answered alive; the remaining store
sessions are then closed (their locks released) in the background.

Everything else in the client uses only this interface (``StoreSessions`` and
``AsyncStoreSessions``):

- ``ref(store)`` → the ``SessionRef`` to put in a request for ``store`` (opens it on
  first use; raises :class:`~tenure.SessionLost` once lost);
- ``next_request_id()`` → the next idempotency key (one increasing counter for the user's
  session, shared by acquires, releases, writes, campaigns);
- ``expired(store)`` → a request answered ``SessionExpired``: the session is lost;
- ``confirm(store, timeout)`` → an immediate keep-alive (a grant near the deadline);
- ``safe_until()``, ``lost``, ``lost_reason``, ``ids()``, ``close()``.

When the server ties the stores' sessions together, only this module changes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from ._core import MAX_REDIRECTS, MAX_UNAVAILABLE, Options, Plan, normalize_endpoint, unwrap
from ._proto import tenure_pb2 as pb
from .errors import (
    ClientClosed,
    ConnectionFailed,
    DeadlineExceeded,
    NotManager,
    SessionExpired,
    SessionLost,
    TenureError,
    Unavailable,
    from_proto,
)

log = logging.getLogger("tenure.sessions")

#: Keep-alive retry pause after a failure: doubles from the first to the second.
RETRY_MIN, RETRY_MAX = 0.05, 0.5


@dataclass
class StoreSession:
    """One store's session and its keep-alive state."""

    store: int
    id: int
    ttl: float
    deadline: float
    next_at: float
    endpoint: Optional[str] = None
    in_flight: bool = False
    retry: float = RETRY_MIN
    redirects: int = 0
    unavailable: int = 0

    def ref(self) -> pb.SessionRef:
        return pb.SessionRef(store=self.store, id=self.id)


class SessionBook:
    """The state machine of a user session's store sessions (no I/O): deadlines, when
    each keep-alive is due, what an answer does, when the session is lost."""

    def __init__(self, ttl: float, opts: Options) -> None:
        if ttl <= 0:
            raise ValueError("a session's ttl must be positive (seconds)")
        self.ttl = ttl
        self.opts = opts
        self.period = ttl / 3
        self.stores: Dict[int, StoreSession] = {}
        self.lost_reason: Optional[str] = None
        self.closed = False
        self._ids = 0
        self._lock = threading.Lock()

    # -- request ids and state ---------------------------------------------------------

    def next_request_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    def check_usable(self) -> None:
        if self.lost_reason is not None:
            raise SessionLost(f"the session is lost: {self.lost_reason}")
        if self.closed:
            raise ClientClosed("the session is closed")

    def deadline_of(self, sent: float, ttl_ms: int) -> float:
        return sent + ttl_ms / 1000.0 - self.opts.clock_drift

    def safe_until(self) -> Optional[float]:
        """The earliest deadline among the store sessions (monotonic clock), ``None``
        before the first store session opens."""
        if not self.stores:
            return None
        return min(s.deadline for s in self.stores.values())

    def ids(self) -> Dict[int, int]:
        return {s.store: s.id for s in self.stores.values()}

    # -- transitions ---------------------------------------------------------------------

    def opened(self, store: int, opened: Any, sent: float, endpoint: Optional[str]) -> StoreSession:
        ttl_ms = opened.ttl_ms or int(self.ttl * 1000)
        st = StoreSession(
            store=store,
            id=opened.session.id,
            ttl=ttl_ms / 1000.0,
            deadline=self.deadline_of(sent, ttl_ms),
            next_at=sent + self.period,
            endpoint=endpoint,
        )
        self.stores[store] = st
        return st

    def lose(self, reason: str) -> bool:
        """Mark the session lost; whether this call did it (first time)."""
        with self._lock:
            if self.lost_reason is not None or self.closed:
                return False
            self.lost_reason = reason
            return True

    def overdue(self, now: float) -> Optional[StoreSession]:
        for s in self.stores.values():
            if now >= s.deadline:
                return s
        return None

    def due(self, now: float) -> List[StoreSession]:
        return [s for s in self.stores.values() if not s.in_flight and now >= s.next_at]

    def next_wakeup(self, now: float) -> float:
        """Seconds until something is due (a keep-alive or a deadline), at most 0.25."""
        t = now + 0.25
        for s in self.stores.values():
            if not s.in_flight:
                t = min(t, s.next_at)
            t = min(t, s.deadline)
        return max(0.0, t - now)

    def target(self, st: StoreSession, first: str) -> str:
        return st.endpoint or first

    def answered(self, st: StoreSession, sent: float, endpoint: str, resp: Any = None,
                 err: Optional[TenureError] = None) -> Optional[str]:
        """Apply one keep-alive outcome (an answer, or a transport error). Returns the
        reason the session is lost, if it is; otherwise schedules the next keep-alive.
        Sets ``st.endpoint`` for the next one (``None``: the router's choice)."""
        now = time.monotonic()
        if err is None and resp is not None:
            which = resp.WhichOneof("result")
            if which == "ok":
                st.deadline = max(st.deadline, self.deadline_of(sent, resp.ok.ttl_ms))
                st.next_at = sent + self.period
                st.endpoint = endpoint
                st.retry = RETRY_MIN
                st.redirects = 0
                st.unavailable = 0
                return None
            err = from_proto(resp.error) if which == "error" else ConnectionFailed(
                "malformed keep-alive answer", endpoint=endpoint)
        assert err is not None
        if isinstance(err, SessionExpired):
            return f"store {st.store}'s session {st.id} expired at its manager"
        st.next_at = now + st.retry
        st.retry = min(st.retry * 2, RETRY_MAX)
        if isinstance(err, NotManager):
            hint = normalize_endpoint(err.hint_endpoint) if err.hint_endpoint else None
            st.unavailable = 0
            if hint and hint != endpoint and st.redirects < MAX_REDIRECTS:
                st.redirects += 1
                st.endpoint = hint
                st.next_at = now
            else:
                st.redirects = 0
                st.endpoint = None
        elif isinstance(err, Unavailable):
            # Between managers: ask the same device again a few times (it forwards to
            # whichever manager comes), then another.
            st.unavailable += 1
            if st.unavailable >= MAX_UNAVAILABLE:
                st.unavailable = 0
                st.endpoint = None
        else:
            st.endpoint = None
        log.debug("keep-alive of store %d session %d at %s failed: %s", st.store, st.id,
                  endpoint, err)
        return None


def _deadline_reason(st: StoreSession) -> str:
    return (f"no keep-alive of store {st.store}'s session {st.id} was answered alive within "
            "its TTL (minus the clock drift bound)")


class StoreSessions:
    """The sync driver: store sessions opened on first use, one keep-alive thread, the
    keep-alives themselves sent from a small pool so a slow device never delays the
    others or the deadline checks."""

    def __init__(self, transport: Any, ttl: float, on_lost: Callable[[str], None]) -> None:
        self._t = transport
        self.book = SessionBook(ttl, transport.opts)
        self._on_lost = on_lost
        self._cond = threading.Condition()
        self._open_locks: Dict[int, threading.Lock] = {}
        self._thread: Optional[threading.Thread] = None
        self._pool: Optional[ThreadPoolExecutor] = None
        self._stop = False

    # -- the interface -------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self.book.lost

    @property
    def lost_reason(self) -> Optional[str]:
        return self.book.lost_reason

    def next_request_id(self) -> int:
        return self.book.next_request_id()

    def safe_until(self) -> Optional[float]:
        return self.book.safe_until()

    def ids(self) -> Dict[int, int]:
        return self.book.ids()

    def ref(self, store: int) -> pb.SessionRef:
        self.book.check_usable()
        st = self.book.stores.get(store)
        if st is not None:
            return st.ref()
        with self._cond:
            lock = self._open_locks.setdefault(store, threading.Lock())
        with lock:
            st = self.book.stores.get(store)
            if st is not None:
                return st.ref()
            self.book.check_usable()
            ttl_ms = int(round(self.book.ttl * 1000))
            req = pb.OpenSessionRequest(store=store, ttl_ms=ttl_ms,
                                        client_name=self._t.opts.client_name,
                                        request_id=self.book.next_request_id())
            sent_box: List[float] = []
            ep_box: List[str] = []

            # The send time of the attempt that succeeded counts: record it per attempt.
            def make() -> Any:
                sent_box.append(time.monotonic())
                return req

            opened = self._open(make, sent_box, ep_box)
            with self._cond:
                if self.book.lost or self.book.closed:
                    # Lost (or closed) while opening: do not keep this one.
                    self._close_one(store, opened.session.id)
                    self.book.check_usable()
                st = self.book.opened(store, opened, sent_box[-1], ep_box[-1] if ep_box else None)
                self._ensure_thread()
                self._cond.notify_all()
            log.debug("opened session %d in store %d (ttl %.1f s)", st.id, store, st.ttl)
            return st.ref()

    def _open(self, make: Callable[[], Any], sent_box: List[float], ep_box: List[str]) -> Any:
        """``OpenSession`` under a retry plan, noting the endpoint that answered."""
        t = self._t
        plan = Plan(t.router, t.opts)
        while True:
            target = plan.target
            try:
                ok = t.invoke(target, "tenure", "OpenSession", make, plan.timeout())
            except TenureError as e:
                delay = plan.failed(e)
                if delay > 0:
                    t.sleep(delay)
                continue
            plan.succeeded()
            ep_box.append(target)
            return ok

    def expired(self, store: int) -> None:
        """A request for ``store`` answered ``SessionExpired``."""
        st = self.book.stores.get(store)
        sid = st.id if st else "?"
        self._lose(f"store {store}'s session {sid} expired at its manager")

    def confirm(self, store: int, timeout: float) -> bool:
        """Send a keep-alive for ``store`` now and wait for it (bounded): whether the
        session is alive and safe for at least a moment after it."""
        st = self.book.stores.get(store)
        if st is None or self.book.lost:
            return False
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.book.lost:
            ep = self.book.target(st, self._t.router.first())
            sent = time.monotonic()
            try:
                resp = self._t.keep_alive_once(ep, st.store, st.id, max(0.05, end - sent))
                reason = self.book.answered(st, sent, ep, resp=resp)
                if resp.WhichOneof("result") == "ok":
                    self._t.router.succeeded(ep)
                    return True
            except TenureError as e:
                if isinstance(e, (ConnectionFailed, DeadlineExceeded)):
                    self._t.router.failed(ep)
                reason = self.book.answered(st, sent, ep, err=e)
            if reason:
                self._lose(reason)
                return False
            time.sleep(min(st.retry, max(0.0, end - time.monotonic())))
        return False

    def close(self, timeout: float = 5.0) -> None:
        """Close every store session (their locks are released at once, without
        lock-delay) and stop the keep-alive loop. Best effort, bounded by ``timeout``."""
        with self._cond:
            if self.book.closed:
                return
            was_lost = self.book.lost
            self.book.closed = True
            self._stop = True
            self._cond.notify_all()
            stores = list(self.book.stores.values())
        if not was_lost:
            end = time.monotonic() + timeout
            for st in stores:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._close_one(st.store, st.id, left)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- internals -----------------------------------------------------------------------

    def _close_one(self, store: int, sid: int, deadline: float = 5.0) -> None:
        req = pb.CloseSessionRequest(session=pb.SessionRef(store=store, id=sid))
        try:
            self._t.call("tenure", "CloseSession", req, deadline=deadline)
        except SessionExpired:
            pass
        except TenureError as e:
            log.debug("closing session %d of store %d failed: %s", sid, store, e)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tenure-keepalive")
            self._thread = threading.Thread(target=self._loop, name="tenure-session",
                                            daemon=True)
            self._thread.start()

    def _lose(self, reason: str) -> None:
        if not self.book.lose(reason):
            return
        log.warning("tenure session lost: %s", reason)
        with self._cond:
            self._cond.notify_all()
        try:
            self._on_lost(reason)
        finally:
            # Close what is left (the locks of the other stores are released) in the
            # background: the user's session is over.
            def closer() -> None:
                for st in list(self.book.stores.values()):
                    if not reason.startswith(f"store {st.store}'s session {st.id} expired"):
                        self._close_one(st.store, st.id, 5.0)
            if not self._t.closed:
                threading.Thread(target=closer, name="tenure-session-close", daemon=True).start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stop or self.book.lost:
                    return
                now = time.monotonic()
                over = self.book.overdue(now)
                due = [] if over else self.book.due(now)
                for st in due:
                    st.in_flight = True
                if not over and not due:
                    self._cond.wait(self.book.next_wakeup(now))
                    continue
            if over is not None:
                self._lose(_deadline_reason(over))
                return
            for st in due:
                try:
                    assert self._pool is not None
                    self._pool.submit(self._keep_alive, st)
                except RuntimeError:  # the pool shut down: closing
                    return

    def _keep_alive(self, st: StoreSession) -> None:
        reason = None
        try:
            ep = self.book.target(st, self._t.router.first())
            sent = time.monotonic()
            timeout = max(0.2, min(self._t.opts.attempt_timeout, self.book.period))
            try:
                resp = self._t.keep_alive_once(ep, st.store, st.id, timeout)
                with self._cond:
                    reason = self.book.answered(st, sent, ep, resp=resp)
                if resp.WhichOneof("result") == "ok":
                    self._t.router.succeeded(ep)
            except ClientClosed:
                return
            except TenureError as e:
                if isinstance(e, (ConnectionFailed, DeadlineExceeded)):
                    self._t.router.failed(ep)
                with self._cond:
                    reason = self.book.answered(st, sent, ep, err=e)
        except Exception as e:  # pragma: no cover - never let the pool swallow silently
            log.exception("keep-alive failed unexpectedly: %s", e)
            st.next_at = time.monotonic() + RETRY_MAX
        finally:
            with self._cond:
                st.in_flight = False
                self._cond.notify_all()
        if reason:
            self._lose(reason)


class AsyncStoreSessions:
    """The asyncio driver: the same bookkeeping, one keep-alive task, each keep-alive a
    task of its own."""

    def __init__(self, transport: Any, ttl: float, on_lost: Callable[[str], None]) -> None:
        self._t = transport
        self.book = SessionBook(ttl, transport.opts)
        self._on_lost = on_lost
        self._open_locks: Dict[int, asyncio.Lock] = {}
        self._task: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._tasks: set = set()
        self._stop = False

    @property
    def lost(self) -> bool:
        return self.book.lost

    @property
    def lost_reason(self) -> Optional[str]:
        return self.book.lost_reason

    def next_request_id(self) -> int:
        return self.book.next_request_id()

    def safe_until(self) -> Optional[float]:
        return self.book.safe_until()

    def ids(self) -> Dict[int, int]:
        return self.book.ids()

    async def ref(self, store: int) -> pb.SessionRef:
        self.book.check_usable()
        st = self.book.stores.get(store)
        if st is not None:
            return st.ref()
        lock = self._open_locks.setdefault(store, asyncio.Lock())
        async with lock:
            st = self.book.stores.get(store)
            if st is not None:
                return st.ref()
            self.book.check_usable()
            ttl_ms = int(round(self.book.ttl * 1000))
            req = pb.OpenSessionRequest(store=store, ttl_ms=ttl_ms,
                                        client_name=self._t.opts.client_name,
                                        request_id=self.book.next_request_id())
            plan = Plan(self._t.router, self._t.opts)
            while True:
                target = plan.target
                sent = time.monotonic()
                try:
                    opened = await self._t.invoke(target, "tenure", "OpenSession", req,
                                                  plan.timeout(), unwrap)
                except TenureError as e:
                    delay = plan.failed(e)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    continue
                plan.succeeded()
                break
            if self.book.lost or self.book.closed:
                await self._close_one(store, opened.session.id)
                self.book.check_usable()
            st = self.book.opened(store, opened, sent, target)
            self._ensure_task()
            self._poke()
            log.debug("opened session %d in store %d (ttl %.1f s)", st.id, store, st.ttl)
            return st.ref()

    def expired(self, store: int) -> None:
        st = self.book.stores.get(store)
        sid = st.id if st else "?"
        self._lose(f"store {store}'s session {sid} expired at its manager")

    async def confirm(self, store: int, timeout: float) -> bool:
        st = self.book.stores.get(store)
        if st is None or self.book.lost:
            return False
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.book.lost:
            ep = self.book.target(st, self._t.router.first())
            sent = time.monotonic()
            try:
                resp = await self._t.keep_alive_once(ep, st.store, st.id, max(0.05, end - sent))
                reason = self.book.answered(st, sent, ep, resp=resp)
                if resp.WhichOneof("result") == "ok":
                    self._t.router.succeeded(ep)
                    return True
            except TenureError as e:
                if isinstance(e, (ConnectionFailed, DeadlineExceeded)):
                    self._t.router.failed(ep)
                reason = self.book.answered(st, sent, ep, err=e)
            if reason:
                self._lose(reason)
                return False
            await asyncio.sleep(min(st.retry, max(0.0, end - time.monotonic())))
        return False

    async def close(self, timeout: float = 5.0) -> None:
        if self.book.closed:
            return
        was_lost = self.book.lost
        self.book.closed = True
        self._stop = True
        self._poke()
        if not was_lost:
            end = time.monotonic() + timeout
            for st in list(self.book.stores.values()):
                left = end - time.monotonic()
                if left <= 0:
                    break
                await self._close_one(st.store, st.id, left)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for t in list(self._tasks):
            t.cancel()

    async def _close_one(self, store: int, sid: int, deadline: float = 5.0) -> None:
        req = pb.CloseSessionRequest(session=pb.SessionRef(store=store, id=sid))
        try:
            await self._t.call("tenure", "CloseSession", req, deadline=deadline)
        except SessionExpired:
            pass
        except TenureError as e:
            log.debug("closing session %d of store %d failed: %s", sid, store, e)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _ensure_task(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop(),
                                                                name="tenure-session")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _lose(self, reason: str) -> None:
        if not self.book.lose(reason):
            return
        log.warning("tenure session lost: %s", reason)
        self._poke()
        try:
            self._on_lost(reason)
        finally:
            async def closer() -> None:
                for st in list(self.book.stores.values()):
                    if not reason.startswith(f"store {st.store}'s session {st.id} expired"):
                        await self._close_one(st.store, st.id, 5.0)
            if not self._t.closed:
                try:
                    self._spawn(closer())
                except RuntimeError:  # pragma: no cover - no running loop
                    pass

    async def _loop(self) -> None:
        assert self._wake is not None
        while not self._stop and not self.book.lost:
            now = time.monotonic()
            over = self.book.overdue(now)
            if over is not None:
                self._lose(_deadline_reason(over))
                return
            for st in self.book.due(now):
                st.in_flight = True
                self._spawn(self._keep_alive(st))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.book.next_wakeup(time.monotonic()))
            except asyncio.TimeoutError:
                pass

    async def _keep_alive(self, st: StoreSession) -> None:
        reason = None
        try:
            ep = self.book.target(st, self._t.router.first())
            sent = time.monotonic()
            timeout = max(0.2, min(self._t.opts.attempt_timeout, self.book.period))
            try:
                resp = await self._t.keep_alive_once(ep, st.store, st.id, timeout)
                reason = self.book.answered(st, sent, ep, resp=resp)
                if resp.WhichOneof("result") == "ok":
                    self._t.router.succeeded(ep)
            except ClientClosed:
                return
            except TenureError as e:
                if isinstance(e, (ConnectionFailed, DeadlineExceeded)):
                    self._t.router.failed(ep)
                reason = self.book.answered(st, sent, ep, err=e)
        finally:
            st.in_flight = False
            self._poke()
        if reason:
            self._lose(reason)
