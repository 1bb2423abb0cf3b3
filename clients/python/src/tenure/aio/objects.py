"""The object store for asyncio (see :mod:`tenure.objects`)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import grpc

from .._core import PUT_LIMIT, Plan, to_bytes
from .._proto import tenure_pb2 as pb
from ..errors import (
    ConnectionFailed,
    DeadlineExceeded,
    MalformedResponse,
    SessionExpired,
    SessionLost,
    TenureError,
    TooLarge,
    from_proto,
)
from ..objects import Fence, conditions, fence_of, upload_requests, written
from ..types import Listing, Object, ObjectChange, ObjectInfo, ObjectWritten
from .client import Pending

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, Session

log = logging.getLogger("tenure.objects")


async def collect_get(call: Any) -> Object:
    info = None
    chunks: List[bytes] = []
    async for m in call:
        kind = m.WhichOneof("kind")
        if kind == "meta":
            info = ObjectInfo._from_proto(m.meta)
        elif kind == "data":
            chunks.append(m.data)
        elif kind == "error":
            raise from_proto(m.error)
    if info is None:
        raise MalformedResponse("the object's description did not come")
    return Object(info=info, value=b"".join(chunks))


class Objects:
    """The object store API of a :class:`tenure.aio.Client` (``client.objects``); the
    methods of :class:`tenure.objects.Objects`, as coroutines."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._watches: List["ObjectWatch"] = []

    async def _close(self) -> None:
        watches, self._watches = self._watches, []
        for w in watches:
            await w.close()

    def _writer(self, session: Optional["Session"], fence_session: Any,
                ephemeral: bool) -> "Session":
        s = session or fence_session
        if s is None:
            if ephemeral:
                raise ValueError("an ephemeral object needs a session (session=...): it is "
                                 "deleted when that session ends")
            s = self._c._writer_session()
        return s

    async def _session_write(self, s: "Session", make: Any) -> Any:
        """Run a write carrying ``s``'s session (id and home store) and one request id."""
        try:
            ref = await s._ref()
        except SessionLost:
            if s is self._c._writer:
                s = self._c._writer_session()
                ref = await s._ref()
            else:
                raise
        rid = s._next_id()
        try:
            return await make(ref, rid)
        except SessionExpired as e:
            s._raise_expired(e)

    def _attempt(self, size: int) -> float:
        return self._c.options.attempt_timeout + (size + (1 << 20) - 1) // (1 << 20)

    async def put(self, key: str, value: Union[bytes, str], *, if_absent: bool = False,
                  if_revision: Optional[int] = None, fence: Optional[Fence] = None,
                  ephemeral: bool = False, session: Optional["Session"] = None) -> ObjectWritten:
        """Write ``value`` under ``key`` (see :meth:`tenure.objects.Objects.put`)."""
        data = to_bytes(value)
        f, fsession = fence_of(fence)
        s = self._writer(session, fsession, ephemeral)
        cond = conditions(if_absent, if_revision, f)
        t = self._c._t

        async def make(ref: pb.SessionRef, rid: int) -> ObjectWritten:
            if len(data) <= PUT_LIMIT:
                req = pb.PutObjectRequest(key=key, data=data, conditions=cond,
                                          ephemeral=ephemeral, session=ref.id,
                                          session_store=ref.store, request_id=rid)
                try:
                    return written(await t.call("objects", "Put", req,
                                                attempt_timeout=self._attempt(len(data))))
                except TooLarge:
                    pass
            header = pb.UploadHeader(key=key, conditions=cond, ephemeral=ephemeral,
                                     session=ref.id, session_store=ref.store,
                                     request_id=rid, size=len(data))
            hint = await self._manager_hint(key)
            return written(await t.call(
                "objects", "Upload", lambda: upload_requests(header, data), hint=hint,
                attempt_timeout=self._attempt(len(data)),
                deadline=self._c.options.deadline + self._attempt(len(data))))

        return await self._session_write(s, make)

    async def _manager_hint(self, key: str) -> Optional[str]:
        try:
            return (await self._c.resolve(key)).endpoint
        except TenureError:
            return None

    async def get(self, key: str) -> Object:
        """The object under ``key`` (see :meth:`tenure.objects.Objects.get`)."""
        return await self._c._t.call("objects", "Get", pb.GetObjectRequest(key=key),
                                     collect=collect_get, streaming=True,
                                     attempt_timeout=self._attempt(64 << 20))

    async def head(self, key: str) -> ObjectInfo:
        """The description of the object under ``key``."""
        return ObjectInfo._from_proto(
            await self._c._t.call("objects", "Head", pb.HeadObjectRequest(key=key)))

    async def delete(self, key: str, *, if_revision: Optional[int] = None,
                     fence: Optional[Fence] = None,
                     session: Optional["Session"] = None) -> ObjectWritten:
        """Delete the object under ``key`` (see :meth:`tenure.objects.Objects.delete`)."""
        f, fsession = fence_of(fence)
        s = self._writer(session, fsession, False)
        cond = conditions(False, if_revision, f)

        async def make(ref: pb.SessionRef, rid: int) -> ObjectWritten:
            req = pb.DeleteObjectRequest(key=key, conditions=cond, session=ref.id,
                                         session_store=ref.store, request_id=rid)
            return written(await self._c._t.call("objects", "Delete", req))

        return await self._session_write(s, make)

    async def list(self, prefix: str, *, store: Optional[int] = None, limit: int = 0) -> Listing:
        """The objects at and under ``prefix`` (see :meth:`tenure.objects.Objects.list`)."""
        if prefix == "/" and store is None:
            stores: List[Optional[int]] = list(range((await self._c.status()).stores))
        else:
            stores = [store]
        objects: List[ObjectInfo] = []
        revisions: Dict[int, int] = {}
        for s in stores:
            req = pb.ListObjectsRequest(prefix=prefix, limit=limit)
            if s is not None:
                req.store = s
            r = await self._c._t.call("objects", "List", req)
            revisions[r.store] = r.revision
            objects.extend(ObjectInfo._from_proto(o) for o in r.objects)
        objects.sort(key=lambda o: o.key)
        revision = next(iter(revisions.values())) if len(revisions) == 1 else None
        return Listing(objects=objects, revision=revision, revisions=revisions)

    def watch(self, prefix: str, *, after: Optional[int] = None, include_values: bool = False,
              store: Optional[int] = None) -> "Pending[ObjectWatch]":
        """Watch the objects at and under ``prefix`` (see
        :meth:`tenure.objects.Objects.watch`): ``w = await c.objects.watch(...)`` or
        ``async with c.objects.watch(...) as w:``, then ``async for change in w``."""
        async def make() -> ObjectWatch:
            w = ObjectWatch(self._c, prefix, after=after, include_values=include_values,
                            store=store)
            self._watches.append(w)
            try:
                await w._start()
            except BaseException:
                await w.close()
                raise
            return w
        return Pending(make)


_END = object()


class ObjectWatch:
    """A running object watch: ``async for change in watch``; :meth:`next` with a
    timeout; :meth:`close` (or ``async with``) to stop it."""

    def __init__(self, client: "Client", prefix: str, *, after: Optional[int],
                 include_values: bool, store: Optional[int]) -> None:
        self._c = client
        self.prefix = prefix
        self._include = include_values
        self._store = store
        self.started_after: Optional[int] = after
        self.revision: Optional[int] = after
        self._q: "asyncio.Queue[Any]" = asyncio.Queue()
        self._ready = asyncio.Event()
        self._first_error: Optional[BaseException] = None
        self._task: Optional[asyncio.Task] = None
        self._call: Any = None
        self._closed = False
        self._done = False
        self._registered = False
        self._opened = False
        #: The device the watch's stream is open at.
        self.endpoint: Optional[str] = None
        #: How many times the stream was opened again (at another device) after it broke.
        self.resumptions = 0

    def _request(self) -> pb.WatchObjectsRequest:
        req = pb.WatchObjectsRequest(prefix=self.prefix, include_values=self._include)
        if self._store is not None:
            req.store = self._store
        if self.revision is not None:
            req.after = self.revision
        return req

    async def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            await asyncio.wait_for(self._ready.wait(), self._c.options.deadline + 1.0)
        except asyncio.TimeoutError:
            raise TimeoutError(f"the watch of {self.prefix} was not registered in time") from None
        if self._first_error is not None:
            raise self._first_error

    async def _run(self) -> None:
        t = self._c._t
        # See tenure.objects.ObjectWatch._run: the watch keeps to its device, and opens
        # again at another one, after the last revision delivered, only when its stream
        # breaks.
        plan = Plan(t.router, self._c.options)
        while not self._closed:
            target = plan.target
            self._registered = False
            try:
                await self._stream(target)
                err: TenureError = ConnectionFailed(
                    f"the watch stream at {target} ended without an error", endpoint=target)
            except TenureError as e:
                err = e
            if self._closed:
                return
            if not err.retryable:
                self._fail(err)
                return
            if self._registered:
                plan = Plan(t.router, self._c.options)
                plan.target = target
            try:
                delay = plan.failed(err)
            except TenureError as e:
                self._fail(e)
                return
            log.debug("object watch of %s resumes after %s at %s: %s", self.prefix,
                      self.revision, plan.target, err)
            await asyncio.sleep(delay)

    async def _stream(self, target: str) -> None:
        t = self._c._t
        if self._opened:
            self.resumptions += 1
        self._opened = True
        self.endpoint = target
        call = t.stub(target, "objects").Watch(self._request(), metadata=t.metadata)
        self._call = call
        try:
            while True:
                if not self._registered:
                    # `watching` comes within the attempt timeout, else another device.
                    try:
                        m = await asyncio.wait_for(call.read(), self._c.options.attempt_timeout)
                    except asyncio.TimeoutError:
                        raise DeadlineExceeded(f"no answer in time from the device at {target}",
                                               endpoint=target) from None
                else:
                    m = await call.read()
                if m is grpc.aio.EOF:
                    return
                kind = m.WhichOneof("kind")
                if kind == "watching":
                    if self.started_after is None:
                        self.started_after = m.watching.revision
                    if self.revision is None:
                        self.revision = m.watching.revision
                    t.router.succeeded(target)
                    self._registered = True
                    self._ready.set()
                elif kind == "events":
                    for c in m.events.changes:
                        if self.revision is not None and c.revision <= self.revision:
                            continue
                        self.revision = c.revision
                        self._q.put_nowait(ObjectChange._from_proto(c))
                elif kind == "error":
                    raise from_proto(m.error)
        except grpc.RpcError as e:
            if self._closed:
                return
            raise t.rpc_error(e, target) from None
        finally:
            call.cancel()

    def _fail(self, e: BaseException) -> None:
        if not self._ready.is_set():
            self._first_error = e
            self._ready.set()
        else:
            self._q.put_nowait(e)
        self._q.put_nowait(_END)

    def __aiter__(self) -> "ObjectWatch":
        return self

    async def __anext__(self) -> ObjectChange:
        return await self.next()

    async def next(self, timeout: Optional[float] = None) -> ObjectChange:
        """The next change, waiting at most ``timeout`` seconds (:class:`TimeoutError`);
        :class:`StopAsyncIteration` once the watch is closed."""
        if self._done:
            raise StopAsyncIteration
        try:
            item = await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no change under {self.prefix} within {timeout} s") from None
        if item is _END:
            self._done = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    async def close(self) -> None:
        """Stop the watch."""
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

    async def __aenter__(self) -> "ObjectWatch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
