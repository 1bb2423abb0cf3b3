"""Leader elections for asyncio (see :mod:`tenure.elections`)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Union

import grpc

from .._core import Plan, to_bytes
from .._proto import elections_pb2 as epb
from ..elections import election_key
from ..errors import DeadlineExceeded, SessionExpired, TenureError, Timeout, WouldBlock, from_proto
from ..types import FencingToken, Leader, LeaderChange
from .client import Pending, call_back

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, Session

log = logging.getLogger("tenure.elections")


class Elections:
    """Elections without a session (``client.elections``): read the leader, observe."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._observations: List["Observation"] = []

    async def _close(self) -> None:
        obs, self._observations = self._observations, []
        for o in obs:
            await o.close()

    async def leader(self, name: str) -> Optional[Leader]:
        """The current leader of election ``name``, or ``None``."""
        r = await self._c._t.call("elections", "Leader", epb.LeaderRequest(name=name))
        return Leader._from_proto(r.leader) if r.HasField("leader") else None

    def observe(self, name: str, *, after: Optional[int] = None) -> "Pending[Observation]":
        """Observe election ``name`` (see :meth:`tenure.elections.Elections.observe`):
        ``await`` it, or ``async with``; then ``async for change in observation``."""
        async def make() -> Observation:
            o = Observation(self._c, name, after)
            self._observations.append(o)
            try:
                await o._start()
            except BaseException:
                await o.close()
                raise
            return o
        return Pending(make)


class Election:
    """Election ``name`` as seen by one session (``session.election(name)``)."""

    def __init__(self, session: "Session", name: str) -> None:
        self.session = session
        self.name = name
        self.leadership: Optional["Leadership"] = None

    def campaign(self, value: Union[bytes, str] = b"", *, timeout: Optional[float] = None,
                 on_lost: Optional[Callable[["Leadership"], Any]] = None) -> "Pending[Leadership]":
        """Wait until this session leads, then publish ``value`` (see
        :meth:`tenure.elections.Election.campaign`): ``await`` it, or ``async with`` it
        (resigns on exit)."""
        async def make() -> Leadership:
            l = await self._campaign(value, timeout=timeout, no_wait=False, on_lost=on_lost)
            assert l is not None
            return l
        return Pending(make)

    async def try_campaign(self, value: Union[bytes, str] = b"", *,
                           on_lost: Optional[Callable[["Leadership"], Any]] = None) -> Optional["Leadership"]:
        """Lead now if nobody leads or campaigns first, else ``None``."""
        return await self._campaign(value, timeout=None, no_wait=True, on_lost=on_lost)

    async def _campaign(self, value: Union[bytes, str], *, timeout: Optional[float],
                        no_wait: bool, on_lost: Any) -> Optional["Leadership"]:
        s = self.session
        c = s._client
        opts = c.options
        ref = await s._ref()
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
            info = await c._t.call("elections", "Campaign", req, cancel=s._cancel, **kw)
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
        s._holders.append(l)
        await s._confirm(self.name, lambda: l._resign(quiet=True))
        if s.lost.is_set():
            l._mark_lost(s.lost_reason or "session lost")
        self.leadership = l
        return l

    async def proclaim(self, value: Union[bytes, str]) -> Leader:
        """Publish a new value without giving up leadership."""
        if self.leadership is None:
            raise TenureError(f"this session does not lead {self.name}: campaign first")
        return await self.leadership.proclaim(value)

    async def resign(self) -> bool:
        """Give up leadership; ``False`` when not leading."""
        if self.leadership is None:
            return False
        return await self.leadership.resign()

    async def leader(self) -> Optional[Leader]:
        """The current leader, or ``None``."""
        return await self.session._client.elections.leader(self.name)

    def observe(self, *, after: Optional[int] = None) -> "Pending[Observation]":
        """Observe the election."""
        return self.session._client.elections.observe(self.name, after=after)


class Leadership:
    """Leadership of an election (see :class:`tenure.elections.Leadership`); :attr:`lost`
    is an :class:`asyncio.Event`."""

    def __init__(self, election: Election, leader: Leader, on_lost: Any) -> None:
        self.election = election
        self.session = election.session
        self.leader = leader
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._on_lost = on_lost
        self._ended = False

    def __repr__(self) -> str:
        return f"<tenure.aio.Leadership {self.name!r} token={self.token} value={self.value!r}>"

    @property
    def name(self) -> str:
        return self.leader.name

    @property
    def token(self) -> FencingToken:
        return self.leader.token

    @property
    def value(self) -> bytes:
        return self.leader.value

    @property
    def revision(self) -> int:
        return self.leader.revision

    @property
    def lock_name(self) -> str:
        return election_key(self.leader.name)

    @property
    def safe_until(self) -> Optional[float]:
        return self.session.safe_until

    @property
    def is_leader(self) -> bool:
        until = self.safe_until
        return (not self._ended and not self.lost.is_set() and until is not None
                and time.monotonic() < until)

    def _mark_lost(self, reason: str) -> None:
        if self._ended or self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        call_back(self._on_lost, self, f"leadership of {self.name}")

    async def proclaim(self, value: Union[bytes, str]) -> Leader:
        """Replace the leader's value (fenced by the token)."""
        s = self.session
        req = epb.ProclaimRequest(name=self.name, value=to_bytes(value),
                                  session=await s._ref(), token=self.token._to_proto(),
                                  request_id=s._next_id())
        try:
            info = await s._client._t.call("elections", "Proclaim", req)
        except SessionExpired as e:
            s._raise_expired(e)
            raise  # pragma: no cover
        self.leader = Leader._from_proto(info)
        return self.leader

    async def resign(self) -> bool:
        """Give up leadership; whether this ended one."""
        return await self._resign(quiet=False)

    async def _resign(self, quiet: bool) -> bool:
        if self._ended:
            return False
        self._ended = True
        s = self.session
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
            return (await s._client._t.call("elections", "Resign", req)).was_leader
        except SessionExpired:
            return False
        except TenureError:
            if quiet:
                return False
            raise

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        await self._resign(quiet=exc_type is not None)


_END = object()


class Observation:
    """A running observation: ``async for change in observation``; :meth:`next` with a
    timeout; :meth:`close` to stop."""

    def __init__(self, client: "Client", name: str, after: Optional[int]) -> None:
        self._c = client
        self.name = name
        self.revision: Optional[int] = after
        self._leaderless: Optional[bool] = None
        self._q: "asyncio.Queue[Any]" = asyncio.Queue()
        self._ready = asyncio.Event()
        self._first_error: Optional[BaseException] = None
        self._task: Optional[asyncio.Task] = None
        self._call: Any = None
        self._closed = False
        self._done = False
        self._delivered = False
        self._opened = False
        #: The device the observation's stream is open at.
        self.endpoint: Optional[str] = None
        #: How many times the stream was opened again (a redirect, or at another device
        #: after it broke).
        self.resumptions = 0

    async def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        if self.revision is not None:
            return
        try:
            await asyncio.wait_for(self._ready.wait(), self._c.options.deadline + 1.0)
        except asyncio.TimeoutError:
            raise TimeoutError(f"the observation of {self.name} did not start in time") from None
        if self._first_error is not None:
            raise self._first_error

    async def _run(self) -> None:
        t = self._c._t
        # See tenure.elections.Observation._run.
        plan = Plan(t.router, self._c.options)
        while not self._closed:
            target = plan.target
            self._delivered = False
            try:
                await self._stream(target)
                err: TenureError = DeadlineExceeded("the observation stream ended",
                                                    endpoint=target)
            except TenureError as e:
                err = e
            if self._closed:
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
            await asyncio.sleep(delay)

    async def _stream(self, target: str) -> None:
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
        first = not self._ready.is_set() and self.revision is None
        try:
            while True:
                if first:
                    try:
                        m = await asyncio.wait_for(call.read(), self._c.options.attempt_timeout)
                    except asyncio.TimeoutError:
                        raise DeadlineExceeded(f"no answer in time from the device at {target}",
                                               endpoint=target) from None
                    first = False
                else:
                    m = await call.read()
                if m is grpc.aio.EOF:
                    return
                kind = m.WhichOneof("kind")
                if kind == "change":
                    ch = m.change
                    t.router.succeeded(target)
                    if self.revision is not None and ch.revision <= self.revision \
                            and self._leaderless is not None:
                        continue
                    self.revision = ch.revision
                    self._delivered = True
                    leader = Leader._from_proto(ch.leader) if ch.HasField("leader") else None
                    if leader is None and self._leaderless is True:
                        self._ready.set()
                        continue
                    self._leaderless = leader is None
                    self._q.put_nowait(LeaderChange(revision=ch.revision, leader=leader))
                    self._ready.set()
                elif kind == "error":
                    raise from_proto(m.error)
        except grpc.RpcError as e:
            if self._closed:
                return
            raise t.rpc_error(e, target) from None
        finally:
            call.cancel()

    def _fail(self, e: BaseException) -> None:
        if not self._ready.is_set() and self.revision is None:
            self._first_error = e
            self._ready.set()
        else:
            self._q.put_nowait(e)
        self._q.put_nowait(_END)

    def __aiter__(self) -> "Observation":
        return self

    async def __anext__(self) -> LeaderChange:
        return await self.next()

    async def next(self, timeout: Optional[float] = None) -> LeaderChange:
        """The next change, waiting at most ``timeout`` seconds (:class:`TimeoutError`)."""
        if self._done:
            raise StopAsyncIteration
        try:
            item = await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no change of {self.name} within {timeout} s") from None
        if item is _END:
            self._done = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    async def close(self) -> None:
        """Stop observing."""
        if self._closed:
            return
        self._closed = True
        if self._call is not None:
            self._call.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._q.put_nowait(_END)

    async def __aenter__(self) -> "Observation":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
