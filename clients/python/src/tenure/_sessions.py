"""A user session: ONE server session, opened on first use and kept alive in the background.

The server gives a client one session for every store (DESIGN §4, "One session per
client"): ``OpenSession{ttl_ms}`` without a store opens it in a *home* store the server
picks, and answers its ``SessionRef{store, id}``. That one ref serves names in every
store: acquires, releases, campaigns, proclaims and resigns carry it, object writes carry
its id with ``session_store`` = home. For a name in another store the server runs the
request under the session's *child* there (holder listings and an ephemeral object's
``owner_session`` show the child; the client's ref stays the home one). A keep-alive of
the home session renews every child: it is answered alive only when all are, and
``SessionExpired`` when any expired. Closing the home session closes every child.

Keep-alives: one every TTL/3, each on a one-shot ``KeepAlive`` stream, from ONE background
loop (a thread for the sync client, a task for the asyncio one). The deadline rule: the
session is safe until the *send* time of its last keep-alive answered alive (or of its
``OpenSession``) + the TTL answered − δ_c (the cluster's clock drift bound). The server
renews home and every child after receiving the keep-alive, on clocks at most δ_c away,
so the client's deadline never falls after any of theirs. The session is lost — once, for
good — when a keep-alive (or a request) is answered ``SessionExpired``, or when the
deadline passes without a keep-alive answered alive; it is then closed (what is left of
it released) in the background.

Layout: :class:`SessionCore` holds the state and makes every decision — what to send,
when, what an answer does, when the session is lost — with the time passed in (no I/O,
no clock, no threads). :class:`SessionDriver` (sync) and :class:`AsyncSessionDriver`
(asyncio) only do the calls and the waiting. The rest of the client uses this interface
of the drivers:

- ``ref()`` → the session's ``SessionRef`` (home store and id) for a request of any
  store (opens the session on first use; raises :class:`~tenure.SessionLost` once lost);
- ``home`` → that ref once opened, else ``None`` (no I/O, no checks: releases, resigns);
- ``next_request_id()`` → the next idempotency key (one increasing counter for the
  session, shared by acquires, releases, writes, campaigns);
- ``expired(detail)`` → a request was answered ``SessionExpired``: the session is lost;
- ``confirm(timeout)`` → an immediate keep-alive (a grant near the deadline);
- ``safe_until()``, ``lost``, ``lost_reason``, ``closed``, ``close()``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Set, Tuple, Union

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
#: Longest pause of the keep-alive loop without looking at the state again.
MAX_WAIT = 1.0


# -- the sans-IO core ----------------------------------------------------------------------

@dataclass(frozen=True)
class KeepAlive:
    """Step: send a keep-alive to ``endpoint`` (``None``: the router's choice), giving up
    after ``timeout`` seconds."""

    endpoint: Optional[str]
    timeout: float


@dataclass(frozen=True)
class Wait:
    """Step: nothing to do for ``seconds`` (unless woken)."""

    seconds: float


@dataclass(frozen=True)
class Lost:
    """Step: the deadline passed; the session was lost for ``reason`` (by this step)."""

    reason: str


Step = Union[KeepAlive, Wait, Lost, None]


class SessionCore:
    """The state of one session and every decision about it (no I/O; the caller passes
    the time, on :func:`time.monotonic`'s clock). Not thread-safe, except
    :meth:`next_request_id`: the sync driver calls it under its lock."""

    def __init__(self, ttl: float, opts: Options) -> None:
        if ttl <= 0:
            raise ValueError("a session's ttl must be positive (seconds)")
        self.ttl = ttl
        self.opts = opts
        self.period = ttl / 3
        #: The session's ref (home store and id) once opened.
        self.home: Optional[pb.SessionRef] = None
        self.deadline = 0.0
        self.next_at = 0.0
        #: Where the next keep-alive goes (``None``: the router's choice).
        self.endpoint: Optional[str] = None
        self.lost_reason: Optional[str] = None
        self.closed = False
        self._retry = RETRY_MIN
        self._redirects = 0
        self._unavailable = 0
        self._ids = 0
        self._ids_lock = threading.Lock()

    # -- state -----------------------------------------------------------------------------

    def next_request_id(self) -> int:
        with self._ids_lock:
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

    def safe_until(self) -> Optional[float]:
        """The session's deadline (monotonic clock); ``None`` before it opened."""
        return self.deadline if self.home is not None else None

    def _deadline_of(self, sent: float, ttl_ms: int) -> float:
        return sent + ttl_ms / 1000.0 - self.opts.clock_drift

    def _name(self) -> str:
        h = self.home
        return f"session {h.id} (home store {h.store})" if h is not None else "the session"

    # -- opening and closing ---------------------------------------------------------------

    def open_request(self) -> pb.OpenSessionRequest:
        """The ``OpenSession`` to send (no store: the server picks the home store)."""
        return pb.OpenSessionRequest(ttl_ms=int(round(self.ttl * 1000)),
                                     client_name=self.opts.client_name,
                                     request_id=self.next_request_id())

    def opened(self, ok: Any, sent: float, endpoint: Optional[str]) -> bool:
        """An ``OpenSession`` sent at ``sent`` was answered ``ok`` by ``endpoint``. False
        when the session was closed meanwhile: the caller closes the one just opened."""
        if self.closed or self.lost:
            return False
        ttl_ms = ok.ttl_ms or int(round(self.ttl * 1000))
        self.home = pb.SessionRef(store=ok.session.store, id=ok.session.id)
        self.deadline = self._deadline_of(sent, ttl_ms)
        self.next_at = sent + self.period
        self.endpoint = endpoint
        return True

    def begin_close(self) -> Optional[pb.SessionRef]:
        """Close: the ref to close at the server (``None``: nothing to close — never
        opened, lost, or closed already)."""
        if self.closed:
            return None
        self.closed = True
        return self.home if not self.lost else None

    # -- losing ----------------------------------------------------------------------------

    def lose(self, reason: str) -> Optional[str]:
        """Mark the session lost; ``reason`` if this call did it (first time, not closed)."""
        if self.lost_reason is not None or self.closed:
            return None
        self.lost_reason = reason
        return reason

    def expired(self, detail: str) -> Optional[str]:
        """A request under the session was answered ``SessionExpired``."""
        return self.lose(f"{self._name()} expired at the server ({detail})")

    # -- keep-alives -----------------------------------------------------------------------

    def step(self, now: float) -> Step:
        """What the keep-alive loop does next: ``None`` to stop (closed, lost, or not
        opened), :class:`Lost` when the deadline passed (the session is lost now), a
        :class:`KeepAlive` when one is due, else :class:`Wait`."""
        if self.closed or self.lost or self.home is None:
            return None
        if now >= self.deadline:
            reason = self.lose(f"no keep-alive of {self._name()} was answered alive within "
                               "its TTL (less the clock drift bound)")
            return Lost(reason) if reason else None
        if now >= self.next_at:
            # One attempt: the client's attempt timeout, at most a period, and never past
            # the deadline (then the session is lost whatever the answer).
            timeout = max(0.2, min(self.opts.attempt_timeout, self.period))
            return KeepAlive(self.endpoint, min(timeout, max(0.05, self.deadline - now)))
        return Wait(min(MAX_WAIT, min(self.next_at, self.deadline) - now))

    def answered(self, sent: float, now: float, endpoint: str, resp: Any = None,
                 err: Optional[TenureError] = None) -> Tuple[bool, Optional[str]]:
        """Apply the outcome of a keep-alive sent at ``sent`` to ``endpoint``: its answer,
        or a transport error. Returns (answered alive, the reason the session was lost
        if this outcome lost it). Schedules the next keep-alive and its endpoint."""
        if self.closed or self.lost:
            return False, None
        if err is None and resp is not None:
            which = resp.WhichOneof("result")
            if which == "ok":
                self.deadline = max(self.deadline, self._deadline_of(sent, resp.ok.ttl_ms))
                self.next_at = sent + self.period
                self.endpoint = endpoint
                self._retry = RETRY_MIN
                self._redirects = 0
                self._unavailable = 0
                return True, None
            err = from_proto(resp.error) if which == "error" else ConnectionFailed(
                "malformed keep-alive answer", endpoint=endpoint)
        assert err is not None
        if isinstance(err, SessionExpired):
            return False, self.expired(err.message or "a keep-alive was answered expired")
        self.next_at = now + self._retry
        self._retry = min(self._retry * 2, RETRY_MAX)
        if isinstance(err, NotManager):
            hint = normalize_endpoint(err.hint_endpoint) if err.hint_endpoint else None
            self._unavailable = 0
            if hint and hint != endpoint and self._redirects < MAX_REDIRECTS:
                self._redirects += 1
                self.endpoint = hint
                self.next_at = now
            else:
                self._redirects = 0
                self.endpoint = None
        elif isinstance(err, Unavailable):
            # A failover under way (of home or of a child's store): ask the same device
            # again a few times (it forwards to whichever manager comes), then another.
            self._unavailable += 1
            if self._unavailable >= MAX_UNAVAILABLE:
                self._unavailable = 0
                self.endpoint = None
        else:
            self.endpoint = None
        log.debug("keep-alive of %s at %s failed: %s", self._name(), endpoint, err)
        return False, None


def _feedback(router: Any, endpoint: str, resp: Any, err: Optional[TenureError]) -> None:
    """Tell the router how ``endpoint`` did (a device that did not answer is passed over)."""
    if err is None and resp is not None and resp.WhichOneof("result") == "ok":
        router.succeeded(endpoint)
    elif isinstance(err, (ConnectionFailed, DeadlineExceeded)):
        router.failed(endpoint)


def _close_request(ref: pb.SessionRef) -> pb.CloseSessionRequest:
    return pb.CloseSessionRequest(session=ref)


def _close_failed(ref: pb.SessionRef, e: TenureError) -> None:
    if not isinstance(e, SessionExpired):
        log.debug("closing session %d of store %d failed: %s", ref.id, ref.store, e)


# -- the sync driver -----------------------------------------------------------------------

class _CoreView:
    """What both drivers read from their :class:`SessionCore`."""

    core: "SessionCore"

    @property
    def lost(self) -> bool:
        return self.core.lost

    @property
    def lost_reason(self) -> Optional[str]:
        return self.core.lost_reason

    @property
    def closed(self) -> bool:
        return self.core.closed

    @property
    def home(self) -> Optional[pb.SessionRef]:
        return self.core.home

    def next_request_id(self) -> int:
        return self.core.next_request_id()


class SessionDriver(_CoreView):
    """The sync driver: opens the session on first use, runs the keep-alive thread."""

    def __init__(self, transport: Any, ttl: float, on_lost: Callable[[str], None]) -> None:
        self._t = transport
        self.core = SessionCore(ttl, transport.opts)
        self._on_lost = on_lost
        self._cond = threading.Condition()
        self._opening = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def safe_until(self) -> Optional[float]:
        return self.core.safe_until()

    def ref(self) -> pb.SessionRef:
        self.core.check_usable()
        home = self.core.home
        if home is not None:
            return home
        with self._opening:
            if self.core.home is None:
                self._open()
        self.core.check_usable()
        assert self.core.home is not None
        return self.core.home

    def _open(self) -> None:
        t = self._t
        req = self.core.open_request()
        plan = Plan(t.router, t.opts)
        while True:
            self.core.check_usable()
            target = plan.target
            sent = time.monotonic()
            try:
                ok = t.invoke(target, "tenure", "OpenSession", req, plan.timeout())
            except TenureError as e:
                delay = plan.failed(e)
                if delay > 0:
                    t.sleep(delay)
                continue
            plan.succeeded()
            break
        with self._cond:
            kept = self.core.opened(ok, sent, target)
            if kept and self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tenure-session",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if not kept:  # closed while it opened
            self._close(pb.SessionRef(store=ok.session.store, id=ok.session.id))
        else:
            log.debug("opened session %d in store %d (ttl %.1f s)", ok.session.id,
                      ok.session.store, self.core.ttl)

    def expired(self, detail: str) -> None:
        """A request under the session was answered ``SessionExpired``."""
        with self._cond:
            reason = self.core.expired(detail)
        if reason:
            self._after_loss(reason)

    def confirm(self, timeout: float) -> bool:
        """Send a keep-alive now (retried within ``timeout``): whether it was answered
        alive."""
        end = time.monotonic() + timeout
        while True:
            home = self.core.home
            now = time.monotonic()
            if home is None or self.core.lost or self.core.closed or now >= end:
                return False
            ep = self.core.endpoint or self._t.router.first()
            try:
                resp, err = self._t.keep_alive_once(ep, home.store, home.id,
                                                    max(0.05, end - now)), None
            except ClientClosed:
                return False
            except TenureError as e:
                resp, err = None, e
            _feedback(self._t.router, ep, resp, err)
            with self._cond:
                alive, reason = self.core.answered(now, time.monotonic(), ep, resp, err)
                pause = self.core.next_at - time.monotonic()
            if reason:
                self._after_loss(reason)
            if alive:
                return True
            time.sleep(max(0.0, min(pause, end - time.monotonic())))

    def close(self, timeout: float = 5.0) -> None:
        """Close the session (its locks everywhere released at once, without lock-delay)
        and stop the keep-alive loop. Best effort, bounded by ``timeout``."""
        with self._cond:
            ref = self.core.begin_close()
            self._cond.notify_all()
        if ref is not None:
            self._close(ref, timeout)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _close(self, ref: pb.SessionRef, deadline: float = 5.0) -> None:
        try:
            self._t.call("tenure", "CloseSession", _close_request(ref), deadline=deadline)
        except TenureError as e:
            _close_failed(ref, e)

    def _after_loss(self, reason: str) -> None:
        log.warning("tenure session lost: %s", reason)
        with self._cond:
            self._cond.notify_all()
        try:
            self._on_lost(reason)
        finally:
            # What is left of it (home, children not expired) is released in the
            # background: the user's session is over.
            home = self.core.home
            if home is not None and not self._t.closed:
                threading.Thread(target=self._close, args=(home,),
                                 name="tenure-session-close", daemon=True).start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                step = self.core.step(time.monotonic())
                if isinstance(step, Wait):
                    self._cond.wait(step.seconds)
                    continue
                home = self.core.home
            if step is None or home is None:
                return
            if isinstance(step, Lost):
                self._after_loss(step.reason)
                return
            ep = step.endpoint or self._t.router.first()
            sent = time.monotonic()
            try:
                resp, err = self._t.keep_alive_once(ep, home.store, home.id, step.timeout), None
            except ClientClosed:
                return
            except TenureError as e:
                resp, err = None, e
            except Exception as e:  # pragma: no cover - never end the loop silently
                log.exception("keep-alive failed unexpectedly: %s", e)
                resp, err = None, ConnectionFailed(str(e), endpoint=ep)
            _feedback(self._t.router, ep, resp, err)
            with self._cond:
                _, reason = self.core.answered(sent, time.monotonic(), ep, resp, err)
            if reason:
                self._after_loss(reason)
                return


# -- the asyncio driver --------------------------------------------------------------------

class AsyncSessionDriver(_CoreView):
    """The asyncio driver: the same core, one keep-alive task."""

    def __init__(self, transport: Any, ttl: float, on_lost: Callable[[str], None]) -> None:
        self._t = transport
        self.core = SessionCore(ttl, transport.opts)
        self._on_lost = on_lost
        self._opening: Optional[asyncio.Lock] = None
        self._task: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._tasks: Set[asyncio.Task] = set()

    def safe_until(self) -> Optional[float]:
        return self.core.safe_until()

    async def ref(self) -> pb.SessionRef:
        self.core.check_usable()
        home = self.core.home
        if home is not None:
            return home
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self.core.home is None:
                await self._open()
        self.core.check_usable()
        assert self.core.home is not None
        return self.core.home

    async def _open(self) -> None:
        t = self._t
        req = self.core.open_request()
        plan = Plan(t.router, t.opts)
        while True:
            self.core.check_usable()
            target = plan.target
            sent = time.monotonic()
            try:
                ok = await t.invoke(target, "tenure", "OpenSession", req, plan.timeout(), unwrap)
            except TenureError as e:
                delay = plan.failed(e)
                if delay > 0:
                    await t.sleep(delay)
                continue
            plan.succeeded()
            break
        if not self.core.opened(ok, sent, target):  # closed while it opened
            await self._close(pb.SessionRef(store=ok.session.store, id=ok.session.id))
            return
        log.debug("opened session %d in store %d (ttl %.1f s)", ok.session.id,
                  ok.session.store, self.core.ttl)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop(),
                                                                name="tenure-session")

    def expired(self, detail: str) -> None:
        reason = self.core.expired(detail)
        if reason:
            self._after_loss(reason)

    async def confirm(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while True:
            home = self.core.home
            now = time.monotonic()
            if home is None or self.core.lost or self.core.closed or now >= end:
                return False
            ep = self.core.endpoint or self._t.router.first()
            try:
                resp, err = await self._t.keep_alive_once(ep, home.store, home.id,
                                                          max(0.05, end - now)), None
            except ClientClosed:
                return False
            except TenureError as e:
                resp, err = None, e
            _feedback(self._t.router, ep, resp, err)
            alive, reason = self.core.answered(now, time.monotonic(), ep, resp, err)
            if reason:
                self._after_loss(reason)
            if alive:
                return True
            pause = self.core.next_at - time.monotonic()
            await asyncio.sleep(max(0.0, min(pause, end - time.monotonic())))

    async def close(self, timeout: float = 5.0) -> None:
        ref = self.core.begin_close()
        self._poke()
        if ref is not None:
            await self._close(ref, timeout)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for task in list(self._tasks):
            task.cancel()

    async def _close(self, ref: pb.SessionRef, deadline: float = 5.0) -> None:
        try:
            await self._t.call("tenure", "CloseSession", _close_request(ref), deadline=deadline)
        except TenureError as e:
            _close_failed(ref, e)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _after_loss(self, reason: str) -> None:
        log.warning("tenure session lost: %s", reason)
        self._poke()
        try:
            self._on_lost(reason)
        finally:
            home = self.core.home
            if home is not None and not self._t.closed:
                try:
                    task = asyncio.get_running_loop().create_task(self._close(home))
                except RuntimeError:  # pragma: no cover - no running loop
                    return
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            step = self.core.step(time.monotonic())
            home = self.core.home
            if step is None or home is None:
                return
            if isinstance(step, Lost):
                self._after_loss(step.reason)
                return
            if isinstance(step, Wait):
                try:
                    await asyncio.wait_for(self._wake.wait(), step.seconds)
                except asyncio.TimeoutError:
                    pass
                continue
            ep = step.endpoint or self._t.router.first()
            sent = time.monotonic()
            try:
                resp, err = await self._t.keep_alive_once(ep, home.store, home.id,
                                                          step.timeout), None
            except ClientClosed:
                return
            except TenureError as e:
                resp, err = None, e
            _feedback(self._t.router, ep, resp, err)
            _, reason = self.core.answered(sent, time.monotonic(), ep, resp, err)
            if reason:
                self._after_loss(reason)
                return
