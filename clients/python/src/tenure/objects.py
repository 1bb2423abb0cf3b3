"""The object store (sync): put (conditional, fenced, ephemeral, streamed above 1 MiB),
get, head, delete, list, and watches that resume where they stopped.

An object lives in the store of its key's first path segment. Writes carry a session —
its id and its home store (``session_store``): one session serves keys of every store —
and a request id, the same for every attempt: a retry after a failover or a lost answer
returns the first attempt's outcome instead of writing twice. Writes made without a
session of the caller's use the client's own session (opened on first use). An
ephemeral object belongs to the session (to its child in the key's store, which
``owner_session`` shows when that is not the home store) and goes when it ends.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

import grpc

from ._core import PUT_LIMIT, UPLOAD_SLICE, Plan, to_bytes
from ._proto import tenure_pb2 as pb
from .errors import (
    ConnectionFailed,
    DeadlineExceeded,
    SessionExpired,
    SessionLost,
    TenureError,
    TooLarge,
    from_proto,
)
from .types import FencingToken, Listing, Object, ObjectChange, ObjectInfo, ObjectWritten

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, Session

log = logging.getLogger("tenure.objects")

Fence = Union[Any, Tuple[str, FencingToken]]


def fence_of(fence: Any) -> Tuple[Optional[pb.Fence], Any]:
    """The ``Fence`` of a lock, a leadership, or a ``(lock name, token)`` pair, and the
    session that holds it (``None`` for a pair)."""
    if fence is None:
        return None, None
    if isinstance(fence, tuple):
        name, token = fence
        token = FencingToken(*token)
        return pb.Fence(lock=name, token=token._to_proto()), None
    lock_name = getattr(fence, "lock_name", None) or getattr(fence, "name")
    return pb.Fence(lock=lock_name, token=fence.token._to_proto()), getattr(fence, "session", None)


def conditions(if_absent: bool, if_revision: Optional[int], fence: Optional[pb.Fence]) -> pb.WriteConditions:
    c = pb.WriteConditions(if_absent=if_absent)
    if if_revision is not None:
        c.if_revision = int(if_revision)
    if fence is not None:
        c.fence.CopyFrom(fence)
    return c


def collect_get(stream: Any) -> Object:
    """An ``Objects.Get`` answer stream: the description, then the content."""
    info = None
    chunks: List[bytes] = []
    for m in stream:
        kind = m.WhichOneof("kind")
        if kind == "meta":
            info = ObjectInfo._from_proto(m.meta)
        elif kind == "data":
            chunks.append(m.data)
        elif kind == "error":
            raise from_proto(m.error)
    if info is None:
        from .errors import MalformedResponse
        raise MalformedResponse("the object's description did not come")
    return Object(info=info, value=b"".join(chunks))


def upload_requests(header: pb.UploadHeader, data: bytes) -> Iterator[pb.UploadRequest]:
    yield pb.UploadRequest(header=header)
    for i in range(0, len(data), UPLOAD_SLICE):
        yield pb.UploadRequest(data=data[i:i + UPLOAD_SLICE])


def written(ok: Any) -> ObjectWritten:
    return ObjectWritten(key=ok.key, revision=ok.revision, uuid=getattr(ok, "uuid", ""))


class Objects:
    """The object store API of a :class:`~tenure.Client` (``client.objects``)."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._watches: List["ObjectWatch"] = []
        self._lock = threading.Lock()

    def _close(self) -> None:
        with self._lock:
            watches, self._watches = self._watches, []
        for w in watches:
            w.close()

    def _writer(self, session: Optional["Session"], fence_session: Any,
                ephemeral: bool) -> "Session":
        s = session or fence_session
        if s is None:
            if ephemeral:
                raise ValueError("an ephemeral object needs a session (session=...): it is "
                                 "deleted when that session ends")
            s = self._c._writer_session()
        return s

    def _session_write(self, s: "Session", make: Any) -> Any:
        """Run a write carrying ``s``'s session (id and home store) and one request id."""
        try:
            ref = s._ref()
        except SessionLost:
            if s is self._c._writer:
                s = self._c._writer_session()
                ref = s._ref()
            else:
                raise
        rid = s._next_id()
        try:
            return make(ref, rid)
        except SessionExpired as e:
            s._raise_expired(e)

    def put(self, key: str, value: Union[bytes, str], *, if_absent: bool = False,
            if_revision: Optional[int] = None, fence: Optional[Fence] = None,
            ephemeral: bool = False, session: Optional["Session"] = None) -> ObjectWritten:
        """Write ``value`` under ``key``; the new revision in the returned
        :class:`~tenure.ObjectWritten`.

        Args:
            if_absent: create only: :class:`~tenure.ObjectExists` if the key has an object.
            if_revision: compare-and-set: the active revision must be this one (0: no
                object), else :class:`~tenure.RevisionMismatch`.
            fence: a :class:`~tenure.Lock` (or leadership, or ``(lock name, token)``) of
                the key's store: the write applies only while that lock is held with that
                token, else :class:`~tenure.StaleToken` (server-side fencing).
            ephemeral: delete the object when ``session`` ends.
            session: the session the write is made in (default: the fence's, else the
                client's own).

        Values up to 1 MiB travel in one message; larger ones are streamed.
        """
        data = to_bytes(value)
        f, fsession = fence_of(fence)
        s = self._writer(session, fsession, ephemeral)
        cond = conditions(if_absent, if_revision, f)
        t = self._c._t

        def make(ref: pb.SessionRef, rid: int) -> ObjectWritten:
            if len(data) <= PUT_LIMIT:
                req = pb.PutObjectRequest(key=key, data=data, conditions=cond,
                                          ephemeral=ephemeral, session=ref.id,
                                          session_store=ref.store, request_id=rid)
                try:
                    return written(t.call("objects", "Put", req,
                                          attempt_timeout=self._attempt(len(data))))
                except TooLarge:
                    pass  # the server's limit is lower than ours: stream it
            header = pb.UploadHeader(key=key, conditions=cond, ephemeral=ephemeral,
                                     session=ref.id, session_store=ref.store,
                                     request_id=rid, size=len(data))
            hint = self._manager_hint(key)
            return written(t.call("objects", "Upload", lambda: upload_requests(header, data),
                                  hint=hint, attempt_timeout=self._attempt(len(data)),
                                  deadline=self._c.options.deadline + self._attempt(len(data))))

        return self._session_write(s, make)

    def _attempt(self, size: int) -> float:
        # One attempt: the client's, and a second more per MiB (each block is a replicated
        # durable write).
        return self._c.options.attempt_timeout + (size + (1 << 20) - 1) // (1 << 20)

    def _manager_hint(self, key: str) -> Optional[str]:
        """The manager's endpoint for ``key`` (payloads above a block are not forwarded):
        saves a redirect."""
        try:
            return self._c.resolve(key).endpoint
        except TenureError:
            return None

    def get(self, key: str) -> Object:
        """The object under ``key`` (a linearizable read): :class:`~tenure.Object` with
        ``value`` and ``revision``. :class:`~tenure.NoSuchObject` if there is none."""
        return self._c._t.call("objects", "Get", pb.GetObjectRequest(key=key),
                               collect=collect_get, attempt_timeout=self._attempt(64 << 20))

    def head(self, key: str) -> ObjectInfo:
        """The description of the object under ``key`` (no content)."""
        return ObjectInfo._from_proto(
            self._c._t.call("objects", "Head", pb.HeadObjectRequest(key=key)))

    def delete(self, key: str, *, if_revision: Optional[int] = None,
               fence: Optional[Fence] = None,
               session: Optional["Session"] = None) -> ObjectWritten:
        """Delete the object under ``key`` (conditions as for :meth:`put`); the revision
        of the deletion. :class:`~tenure.NoSuchObject` if there is none."""
        f, fsession = fence_of(fence)
        s = self._writer(session, fsession, False)
        cond = conditions(False, if_revision, f)

        def make(ref: pb.SessionRef, rid: int) -> ObjectWritten:
            req = pb.DeleteObjectRequest(key=key, conditions=cond, session=ref.id,
                                         session_store=ref.store, request_id=rid)
            return written(self._c._t.call("objects", "Delete", req))

        return self._session_write(s, make)

    def list(self, prefix: str, *, store: Optional[int] = None, limit: int = 0) -> Listing:
        """The active objects at and under ``prefix`` in key order, and the revision they
        were read at (a prefix lives in one store; ``"/"`` with ``store`` lists that
        store, ``"/"`` alone every store)."""
        if prefix == "/" and store is None:
            stores: List[Optional[int]] = list(range(self._c.status().stores))
        else:
            stores = [store]
        objects: List[ObjectInfo] = []
        revisions: Dict[int, int] = {}
        for s in stores:
            req = pb.ListObjectsRequest(prefix=prefix, limit=limit)
            if s is not None:
                req.store = s
            r = self._c._t.call("objects", "List", req)
            revisions[r.store] = r.revision
            objects.extend(ObjectInfo._from_proto(o) for o in r.objects)
        objects.sort(key=lambda o: o.key)
        revision = next(iter(revisions.values())) if len(revisions) == 1 else None
        return Listing(objects=objects, revision=revision, revisions=revisions)

    def watch(self, prefix: str, *, after: Optional[int] = None, include_values: bool = False,
              store: Optional[int] = None) -> "ObjectWatch":
        """Watch the objects at and under ``prefix``: an iterator of
        :class:`~tenure.ObjectChange` in revision order, each with its content when
        ``include_values`` and the content is small. Starts after revision ``after``
        (``None``: from now); returns once the watch is registered.

        Any device serves the watch, and a change of the store's manager does not show
        on it (the server carries the watch over to the new manager). When the device
        it talks to goes down, the watch opens again at another device after the last
        revision it delivered: nothing is lost, nothing comes twice. It ends with
        :class:`~tenure.Compacted` when the store's history no longer reaches back to its
        position (re-list, then watch from the listing's revision), or with the error of
        an invalid prefix.
        """
        w = ObjectWatch(self._c, prefix, after=after, include_values=include_values, store=store)
        with self._lock:
            self._watches.append(w)
        try:
            w._start()
        except BaseException:
            w.close()
            raise
        return w


_END = object()


class ObjectWatch:
    """A running object watch: iterate it for :class:`~tenure.ObjectChange`; ``next``
    with a timeout; ``close`` (or use it as a context manager) to stop it.

    Attributes:
        started_after: the revision the watch started after.
        revision: the last revision delivered (or ``started_after``): resume from it.
        endpoint: the device the watch's stream is open at.
        resumptions: how many times the stream was opened again after it broke.
    """

    def __init__(self, client: "Client", prefix: str, *, after: Optional[int],
                 include_values: bool, store: Optional[int]) -> None:
        self._c = client
        self.prefix = prefix
        self._include = include_values
        self._store = store
        self.started_after: Optional[int] = after
        self.revision: Optional[int] = after
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._closed = threading.Event()
        self._call: Any = None
        self._ready = threading.Event()
        self._first_error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
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

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tenure-object-watch", daemon=True)
        self._thread.start()
        deadline = self._c.options.deadline + 1.0
        if not self._ready.wait(deadline):
            raise TimeoutError(f"the watch of {self.prefix} was not registered in time")
        if self._first_error is not None:
            raise self._first_error

    def _run(self) -> None:
        t = self._c._t
        # Any device serves a watch, and a change of the store's manager does not show on
        # its stream: the watch keeps to the device it opened at. Only when that stream
        # breaks (the device went down, or ended it without saying why) is it opened
        # again, at another device, after the last revision delivered.
        plan = Plan(t.router, self._c.options)
        while not self._closed.is_set():
            target = plan.target
            self._registered = False
            try:
                self._stream(target)
                err: TenureError = ConnectionFailed(
                    f"the watch stream at {target} ended without an error", endpoint=target)
            except TenureError as e:
                err = e
            except grpc.RpcError as e:  # pragma: no cover - mapped in _stream
                err = t.rpc_error(e, target)
            if self._closed.is_set():
                return
            if not err.retryable:
                # Compacted, an invalid prefix, an unknown store, no permission.
                self._fail(err)
                return
            if self._registered:
                # The stream had been serving: a fresh retry budget for the resumption.
                plan = Plan(t.router, self._c.options)
                plan.target = target
            try:
                delay = plan.failed(err)
            except TenureError as e:
                self._fail(e)
                return
            log.debug("object watch of %s resumes after %s at %s: %s", self.prefix,
                      self.revision, plan.target, err)
            if self._closed.wait(delay):
                return

    def _stream(self, target: str) -> None:
        t = self._c._t
        stub = t.stub(target, "objects")
        if self._opened:
            self.resumptions += 1
        self._opened = True
        self.endpoint = target
        call = stub.Watch(self._request(), metadata=t.metadata)
        self._call = call
        if self._closed.is_set():
            call.cancel()
            return
        # `watching` comes within the attempt timeout, else another device is tried.
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            call.cancel()

        timer: Optional[threading.Timer] = threading.Timer(self._c.options.attempt_timeout,
                                                           expire)
        timer.daemon = True
        timer.start()
        try:
            for m in call:
                kind = m.WhichOneof("kind")
                if kind == "watching":
                    if timer is not None:
                        timer.cancel()
                        timer = None
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
                            continue  # already delivered before a resumption
                        self.revision = c.revision
                        self._q.put(ObjectChange._from_proto(c))
                elif kind == "error":
                    raise from_proto(m.error)
        except grpc.RpcError as e:
            if self._closed.is_set():
                return
            if fired.is_set() and not self._registered:
                raise DeadlineExceeded(f"no answer in time from the device at {target}",
                                       endpoint=target) from None
            raise t.rpc_error(e, target) from None
        finally:
            if timer is not None:
                timer.cancel()

    def _fail(self, e: BaseException) -> None:
        if not self._ready.is_set():
            self._first_error = e
            self._ready.set()
        else:
            self._q.put(e)
        self._q.put(_END)

    # -- consuming -----------------------------------------------------------------------

    def __iter__(self) -> "ObjectWatch":
        return self

    def __next__(self) -> ObjectChange:
        return self._take(None)

    def next(self, timeout: Optional[float] = None) -> ObjectChange:
        """The next change, waiting at most ``timeout`` seconds (:class:`TimeoutError`
        then). ``StopIteration`` once the watch is closed."""
        return self._take(timeout)

    def _take(self, timeout: Optional[float]) -> ObjectChange:
        if self._done:
            raise StopIteration
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no change under {self.prefix} within {timeout} s") from None
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def close(self) -> None:
        """Stop the watch (the iterator ends)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._call is not None:
            self._call.cancel()
        self._q.put(_END)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def __enter__(self) -> "ObjectWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
