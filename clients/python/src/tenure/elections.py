"""Leader elections (sync), in the shape of etcd's ``concurrency.Election``.

An election NAME (a path) is the exclusive lock ``NAME/.election`` (its holder leads, its
FIFO queue orders the candidates) and the leader's record, the object
``NAME/.election``, ephemeral to the leader's session and written with the lock's
fencing token. A campaign runs under a :class:`~tenure.Session` (one session serves
elections of every store): when the session ends, so do the campaign and the leadership.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Union

import grpc

from ._core import Plan, to_bytes
from ._proto import elections_pb2 as epb
from .errors import (
    DeadlineExceeded,
    SessionExpired,
    TenureError,
    Timeout,
    WouldBlock,
    from_proto,
)
from .types import FencingToken, Leader, LeaderChange

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, Session

log = logging.getLogger("tenure.elections")


def election_key(name: str) -> str:
    """The key of an election's lock and record: ``NAME/.election``."""
    return f"{name}/.election"


class Elections:
    """Elections without a session (``client.elections``): read the leader, observe."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._observations: List["Observation"] = []
        self._lock = threading.Lock()

    def _close(self) -> None:
        with self._lock:
            obs, self._observations = self._observations, []
        for o in obs:
            o.close()

    def leader(self, name: str) -> Optional[Leader]:
        """The current leader of election ``name`` (a linearizable read), or ``None``."""
        r = self._c._t.call("elections", "Leader", epb.LeaderRequest(name=name))
        return Leader._from_proto(r.leader) if r.HasField("leader") else None

    def observe(self, name: str, *, after: Optional[int] = None) -> "Observation":
        """Observe election ``name``: an iterator of :class:`~tenure.LeaderChange` — the
        current leader (or none) first, then every change (each new leader or value, and
        every "no leader"). With ``after`` (a revision seen), only the changes after it.
        Any device serves it, and a change of the store's manager does not show on it;
        when the device it talks to goes down it resumes at another device after the last
        revision delivered."""
        o = Observation(self._c, name, after)
        with self._lock:
            self._observations.append(o)
        try:
            o._start()
        except BaseException:
            o.close()
            raise
        return o


class Election:
    """Election ``name`` as seen by one session (``session.election(name)``)."""

    def __init__(self, session: "Session", name: str) -> None:
        self.session = session
        self.name = name
        #: The current leadership won by :meth:`campaign` (``None`` when not leading).
        self.leadership: Optional["Leadership"] = None

    def __repr__(self) -> str:
        return f"<tenure.Election {self.name!r} leading={self.leadership is not None}>"

    def campaign(self, value: Union[bytes, str] = b"", *, timeout: Optional[float] = None,
                 on_lost: Optional[Callable[["Leadership"], Any]] = None) -> "Leadership":
        """Wait until this session leads the election, then publish ``value``; the
        :class:`Leadership` (its fencing token). ``timeout`` (seconds) bounds the wait
        (:class:`~tenure.Timeout`). ``on_lost(leadership)`` runs if the session is lost
        while leading."""
        l = self._campaign(value, timeout=timeout, no_wait=False, on_lost=on_lost)
        assert l is not None
        return l

    def try_campaign(self, value: Union[bytes, str] = b"", *,
                     on_lost: Optional[Callable[["Leadership"], Any]] = None) -> Optional["Leadership"]:
        """Lead now if nobody leads or campaigns first: the :class:`Leadership`, or
        ``None``."""
        return self._campaign(value, timeout=None, no_wait=True, on_lost=on_lost)

    def _campaign(self, value: Union[bytes, str], *, timeout: Optional[float], no_wait: bool,
                  on_lost: Optional[Callable[["Leadership"], Any]]) -> Optional["Leadership"]:
        s = self.session
        c = s._client
        opts = c.options
        ref = s._ref()
        req = epb.CampaignRequest(name=self.name, value=to_bytes(value), session=ref,
                                  request_id=s._next_id(), no_wait=no_wait)
        if no_wait:
            kw: dict = {}
        elif timeout is not None:
            # One call carrying the wait: the server elects this session when the
            # election's lock is freed, or answers Timeout once timeout_ms passed. It is
            # sent again (same request id: the same place in the queue) only after a
            # failure (a failover, a device gone), and the whole call ends within the
            # wait and one attempt more.
            req.timeout_ms = max(1, int(round(timeout * 1000)))
            bound = timeout + opts.attempt_timeout
            kw = {"deadline": bound, "attempt_timeout": bound}
        else:
            kw = {"deadline": float("inf"), "attempt_timeout": opts.wait_poll, "cut_ok": True}
        try:
            info = c._t.call("elections", "Campaign", req, cancel=s._cancel, **kw)
        except WouldBlock:
            if no_wait:
                return None
            raise
        except SessionExpired as e:
            s._raise_expired(e)
            raise  # pragma: no cover
        except Timeout:
            raise
        except TenureError as e:
            if timeout is not None and not no_wait and e.retryable:
                what = ("not elected leader in time" if self.name in e.message
                        else f"not elected leader of {self.name} in time")
                raise Timeout(f"{what} ({e.message})", name=self.name) from e
            raise
        l = Leadership(self, Leader._from_proto(info), on_lost)
        with s._guard:
            s._holders.append(l)
        s._confirm(self.name, lambda: l._resign(quiet=True))
        if s.lost.is_set():
            l._mark_lost(s.lost_reason or "session lost")
        self.leadership = l
        return l

    def proclaim(self, value: Union[bytes, str]) -> Leader:
        """Publish a new value without giving up leadership (see
        :meth:`Leadership.proclaim`)."""
        if self.leadership is None:
            raise TenureError(f"this session does not lead {self.name}: campaign first")
        return self.leadership.proclaim(value)

    def resign(self) -> bool:
        """Give up leadership (see :meth:`Leadership.resign`); ``False`` when not leading."""
        if self.leadership is None:
            return False
        return self.leadership.resign()

    def leader(self) -> Optional[Leader]:
        """The current leader, or ``None``."""
        return self.session._client.elections.leader(self.name)

    def observe(self, *, after: Optional[int] = None) -> "Observation":
        """Observe the election (see :meth:`Elections.observe`)."""
        return self.session._client.elections.observe(self.name, after=after)


class Leadership:
    """Leadership of an election, won by :meth:`Election.campaign`. A context manager
    that resigns on exit. :attr:`lost` is set (and ``on_lost`` runs) if the session is
    lost while leading: stop acting as the leader then. Pass :attr:`token` to every
    resource the leader writes (or fence object writes with ``fence=leadership``)."""

    def __init__(self, election: Election, leader: Leader,
                 on_lost: Optional[Callable[["Leadership"], Any]]) -> None:
        self.election = election
        self.session = election.session
        self.leader = leader
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._on_lost = on_lost
        self._ended = False

    def __repr__(self) -> str:
        return f"<tenure.Leadership {self.name!r} token={self.token} value={self.value!r}>"

    @property
    def name(self) -> str:
        return self.leader.name

    @property
    def token(self) -> FencingToken:
        """The leadership's fencing token (the election lock's)."""
        return self.leader.token

    @property
    def value(self) -> bytes:
        return self.leader.value

    @property
    def revision(self) -> int:
        return self.leader.revision

    @property
    def lock_name(self) -> str:
        """The election's lock (``NAME/.election``): writes fenced by it are refused once
        this leadership ended."""
        return election_key(self.leader.name)

    @property
    def safe_until(self) -> Optional[float]:
        return self.session.safe_until

    @property
    def is_leader(self) -> bool:
        """Whether this session certainly leads now."""
        until = self.safe_until
        return (not self._ended and not self.lost.is_set() and until is not None
                and time.monotonic() < until)

    def _mark_lost(self, reason: str) -> None:
        if self._ended or self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        from .client import _call_back
        _call_back(self._on_lost, self, f"leadership of {self.name}")

    def proclaim(self, value: Union[bytes, str]) -> Leader:
        """Replace the leader's value (fenced by the token: :class:`~tenure.StaleToken`
        if this session no longer leads)."""
        s = self.session
        req = epb.ProclaimRequest(name=self.name, value=to_bytes(value), session=s._ref(),
                                  token=self.token._to_proto(), request_id=s._next_id())
        try:
            info = s._client._t.call("elections", "Proclaim", req)
        except SessionExpired as e:
            s._raise_expired(e)
            raise  # pragma: no cover
        self.leader = Leader._from_proto(info)
        return self.leader

    def resign(self) -> bool:
        """Give up leadership: the record is deleted, then the lock released; observers
        see "no leader" before the next candidate leads. Whether this ended a leadership
        (``False``: it had already ended)."""
        return self._resign(quiet=False)

    def _resign(self, quiet: bool) -> bool:
        if self._ended:
            return False
        self._ended = True
        s = self.session
        with s._guard:
            if self in s._holders:
                s._holders.remove(self)
        if self.election.leadership is self:
            self.election.leadership = None
        if self.lost.is_set():
            return False
        # The session's own ref (home store and id), whatever the election's store.
        req = epb.ResignRequest(name=self.name, session=s._home(),
                                token=self.token._to_proto(), request_id=s._next_id())
        try:
            return s._client._t.call("elections", "Resign", req).was_leader
        except SessionExpired:
            return False
        except TenureError:
            if quiet:
                return False
            raise

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._resign(quiet=exc_type is not None)


_END = object()


class Observation:
    """A running observation of an election: iterate it for
    :class:`~tenure.LeaderChange`; :meth:`next` with a timeout; :meth:`close` to stop."""

    def __init__(self, client: "Client", name: str, after: Optional[int]) -> None:
        self._c = client
        self.name = name
        self.revision: Optional[int] = after
        self._leaderless: Optional[bool] = None
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._closed = threading.Event()
        self._ready = threading.Event()
        self._first_error: Optional[BaseException] = None
        self._call: Any = None
        self._thread: Optional[threading.Thread] = None
        self._done = False
        self._delivered = False
        self._opened = False
        #: The device the observation's stream is open at.
        self.endpoint: Optional[str] = None
        #: How many times the stream was opened again (a redirect, or at another device
        #: after it broke).
        self.resumptions = 0

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tenure-observe", daemon=True)
        self._thread.start()
        if self.revision is not None:
            # Resuming: nothing comes until a change; the stream is registered when open.
            return
        if not self._ready.wait(self._c.options.deadline + 1.0):
            raise TimeoutError(f"the observation of {self.name} did not start in time")
        if self._first_error is not None:
            raise self._first_error

    def _run(self) -> None:
        t = self._c._t
        # Any device serves an observation (the election's object watch is carried from
        # the store's manager): it keeps to the device it opened at, follows a
        # `NotManager` hint if one comes, and opens again at another device, after the
        # last revision delivered, when its stream breaks.
        plan = Plan(t.router, self._c.options)
        while not self._closed.is_set():
            target = plan.target
            self._delivered = False
            try:
                self._stream(target)
                err: TenureError = DeadlineExceeded("the observation stream ended",
                                                    endpoint=target)
            except TenureError as e:
                err = e
            if self._closed.is_set():
                return
            if not err.retryable:
                self._fail(err)
                return
            if self._delivered:
                plan = Plan(t.router, self._c.options)
                plan.target = target
            try:
                delay = plan.failed(err)
            except TenureError as e:
                self._fail(e)
                return
            if self._closed.wait(delay):
                return

    def _stream(self, target: str) -> None:
        t = self._c._t
        if self._opened:
            self.resumptions += 1
        self._opened = True
        self.endpoint = target
        req = epb.ObserveRequest(name=self.name)
        if self.revision is not None:
            req.after = self.revision
        call = t.stub(target, "elections").Observe(req, metadata=t.metadata)
        self._call = call
        if self._closed.is_set():
            call.cancel()
            return
        timer = None
        if not self._ready.is_set() and self.revision is None:
            timer = threading.Timer(self._c.options.attempt_timeout, call.cancel)
            timer.daemon = True
            timer.start()
        try:
            for m in call:
                kind = m.WhichOneof("kind")
                if kind == "change":
                    if timer is not None:
                        timer.cancel()
                    ch = m.change
                    t.router.succeeded(target)
                    if self.revision is not None and ch.revision <= self.revision \
                            and self._leaderless is not None:
                        continue
                    self.revision = ch.revision
                    self._delivered = True
                    leader = Leader._from_proto(ch.leader) if ch.HasField("leader") else None
                    # Consecutive "no leader"s (across a resumption) are one.
                    if leader is None and self._leaderless is True:
                        self._ready.set()
                        continue
                    self._leaderless = leader is None
                    self._q.put(LeaderChange(revision=ch.revision, leader=leader))
                    self._ready.set()
                elif kind == "error":
                    raise from_proto(m.error)
        except grpc.RpcError as e:
            if self._closed.is_set():
                return
            if timer is not None and not timer.is_alive() and not self._ready.is_set():
                raise DeadlineExceeded(f"no answer in time from the device at {target}",
                                       endpoint=target) from None
            raise t.rpc_error(e, target) from None
        finally:
            if timer is not None:
                timer.cancel()

    def _fail(self, e: BaseException) -> None:
        if not self._ready.is_set() and self.revision is None:
            self._first_error = e
            self._ready.set()
        else:
            self._q.put(e)
        self._q.put(_END)

    def __iter__(self) -> "Observation":
        return self

    def __next__(self) -> LeaderChange:
        return self._take(None)

    def next(self, timeout: Optional[float] = None) -> LeaderChange:
        """The next change, waiting at most ``timeout`` seconds (:class:`TimeoutError`)."""
        return self._take(timeout)

    def _take(self, timeout: Optional[float]) -> LeaderChange:
        if self._done:
            raise StopIteration
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no change of {self.name} within {timeout} s") from None
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def close(self) -> None:
        """Stop observing."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._call is not None:
            self._call.cancel()
        self._q.put(_END)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
