"""The sync client: :class:`Client`, :class:`Session` and :class:`Lock`."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from . import _core
from ._core import Credentials, Options, StoreCache, parse_endpoints
from ._proto import tenure_pb2 as pb
from ._sessions import SessionDriver
from ._transport import Transport
from .errors import (
    ClientClosed,
    GrantUnconfirmed,
    NotHeld,
    SessionExpired,
    SessionLost,
    TenureError,
    Timeout,
    WouldBlock,
)
from .types import DeviceStatus, FencingToken, LockState, Resolved

log = logging.getLogger("tenure")

PathLike = Union[str, bytes, "os.PathLike[str]"]


def _call_back(cb: Optional[Callable[[Any], Any]], arg: Any, what: str) -> None:
    if cb is None:
        return
    try:
        cb(arg)
    except Exception:  # a user's callback must not break the keep-alive loop
        log.exception("the on_lost callback of %s raised", what)


def _cluster_settings(data_dir: PathLike) -> Dict[str, Any]:
    """Endpoints, CA and admin token of a local cluster (``tenure cluster up --data DIR``)."""
    data = Path(os.fsdecode(data_dir)).expanduser()
    try:
        info = json.loads((data / "cluster.json").read_text())
    except OSError as e:
        raise ValueError(f"no local cluster in {data}: cannot read cluster.json ({e.strerror})") \
            from None
    endpoints = [d["client_addr"] for d in info.get("devices", []) if d.get("client_addr")]
    ca = info.get("ca")
    if not ca and (data / "tls" / "ca.pem").exists():
        ca = str(data / "tls" / "ca.pem")
    token = None
    if (data / "admin.token").exists():
        token = (data / "admin.token").read_text().strip() or None
    return {"endpoints": endpoints, "tls_ca": ca, "token": token}


class Client:
    """A Tenure client (blocking API). Thread-safe; one per process is typical.

    Args:
        endpoints: device client endpoints (``"host:port"``), a list or a comma-separated
            string; ``None`` reads ``TENURE_ENDPOINTS``. Any device serves any request:
            the client keeps to the one that answered last and moves on only when it
            stops answering.
        tls_ca: the cluster's CA certificate (a PEM file path, or the PEM bytes); ``None``
            reads ``TENURE_CA``; without one the client speaks plaintext.
        tls_cert, tls_key: a client certificate and key (PEM paths or bytes), for clusters
            that name client certificates in their ``[auth]``.
        tls_server_name: the name to check the devices' certificates against (default:
            the endpoint's host).
        token: the bearer token sent with every call (``authorization: Bearer ...``);
            ``None`` reads ``TENURE_TOKEN``.
        deadline: default bound (seconds) of one call across all its retries.
        options: every timing setting (:class:`tenure.Options`); ``deadline`` overrides
            its ``deadline``.

    Use it as a context manager, or call :meth:`close`.
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
        self._t = Transport(eps, creds, opts)
        self._stores = StoreCache()
        self._sessions: List["Session"] = []
        self._writer: Optional["Session"] = None
        self._lock = threading.Lock()
        self._closed = False
        from .elections import Elections
        from .lookup import Lookup
        from .objects import Objects
        #: The object store (:class:`tenure.objects.Objects`).
        self.objects = Objects(self)
        #: Elections without a session: the current leader, observations.
        self.elections = Elections(self)
        #: The lookup service (:class:`tenure.lookup.Lookup`).
        self.lookup = Lookup(self)

    @classmethod
    def from_cluster(cls, data_dir: PathLike = "tenure-data", **kwargs: Any) -> "Client":
        """A client of the local cluster whose data directory is ``data_dir`` (made by
        ``tenure cluster up``): its endpoints from ``cluster.json``, its CA (TLS
        clusters) and its admin token (``--auth`` clusters). ``kwargs`` go to the
        constructor and win."""
        settings = _cluster_settings(data_dir)
        settings.update({k: v for k, v in kwargs.items()})
        return cls(**settings)

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close every session made by this client (their locks are released), revoke
        the lookup entries it publishes, stop its watches, and close the connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions)
            if self._writer is not None:
                sessions.append(self._writer)
        self.lookup._close()
        self.objects._close()
        self.elections._close()
        for s in sessions:
            try:
                s.close()
            except TenureError as e:  # pragma: no cover - best effort
                log.debug("closing a session failed: %s", e)
        self._t.close()

    @property
    def endpoints(self) -> List[str]:
        """The endpoints this client knows."""
        return list(self._t.router.endpoints)

    # -- sessions ------------------------------------------------------------------------

    def session(self, ttl: Optional[float] = None, *,
                on_lost: Optional[Callable[["Session"], Any]] = None) -> "Session":
        """A new session (a lease, ``ttl`` seconds, default 10): the owner of locks,
        leaderships and ephemeral objects in every store, kept alive in the background.
        It opens on first use (one ``OpenSession``; the server picks its home store). Use
        it as a context manager, or :meth:`Session.close` it. ``on_lost(session)`` runs
        (on the keep-alive thread) if the session is lost."""
        if self._closed:
            raise ClientClosed("the client is closed")
        s = Session(self, ttl if ttl is not None else self.options.session_ttl, on_lost)
        with self._lock:
            self._sessions.append(s)
        return s

    def _forget(self, s: "Session") -> None:
        with self._lock:
            if s in self._sessions:
                self._sessions.remove(s)

    def _writer_session(self) -> "Session":
        """The client's own session, used to make writes without a session of the
        caller's idempotent across retries (opened on first use)."""
        with self._lock:
            if self._closed:
                raise ClientClosed("the client is closed")
            if self._writer is None or self._writer.lost.is_set():
                self._writer = Session(self, self.options.session_ttl, None)
            return self._writer

    # -- names and status ----------------------------------------------------------------

    def resolve(self, name: str) -> Resolved:
        """Where ``name`` (a lock name or object key) lives: its store, and the store's
        manager and its endpoint as the answering device knows them."""
        r = self._t.call("tenure", "Resolve", pb.ResolveRequest(name=name))
        res = Resolved._from_proto(r)
        self._stores.put(name, res.store)
        return res

    def store_of(self, name: str) -> int:
        """The store ``name`` lives in (asked once per first path segment)."""
        s = self._stores.get(name)
        if s is not None:
            return s
        return self.resolve(name).store

    def status(self, endpoint: Optional[str] = None) -> DeviceStatus:
        """One device's status (``endpoint``, default the one the client talks to): its
        version, the stores it manages, the devices it knows."""
        if endpoint is not None:
            ep = _core.normalize_endpoint(endpoint)
            r = self._t.invoke(ep, "tenure", "Status", pb.StatusRequest(),
                               self.options.attempt_timeout, collect=lambda x: x)
            return DeviceStatus._from_proto(ep, r)
        r, ep = self._t.call("tenure", "Status", pb.StatusRequest(), collect=lambda x: x,
                             with_endpoint=True)
        return DeviceStatus._from_proto(ep, r)

    def holders(self, name: str) -> LockState:
        """Who holds lock ``name`` and who waits for it (a linearizable read)."""
        return LockState._from_proto(
            self._t.call("tenure", "Holder", pb.HolderRequest(name=name)))

    def locks(self, prefix: str, *, store: Optional[int] = None, limit: int = 0) -> List[LockState]:
        """Locks held or waited for at and under ``prefix`` (``"/"`` with ``store``: one
        store; ``"/"`` alone: every store)."""
        if prefix == "/" and store is None:
            stores = range(self.status().stores)
        else:
            stores = [store]  # type: ignore[list-item]
        out: List[LockState] = []
        for s in stores:
            req = pb.ListLocksRequest(prefix=prefix, limit=limit)
            if s is not None:
                req.store = s
            r = self._t.call("tenure", "ListLocks", req)
            out.extend(LockState._from_proto(e) for e in r.locks)
        return sorted(out, key=lambda l: l.name)


class Session:
    """A session: a lease kept alive in the background, owner of locks, leaderships and
    ephemeral objects. Made by :meth:`Client.session`.

    It is one server session, opened on first use in a home store the server picks
    (:attr:`store`, :attr:`id`), that holds names of every store: for a name in another
    store the server holds it under the session's child there (holder listings show the
    child), and the keep-alives of the one session renew them all.

    The session is lost when a keep-alive answers that it expired, or when no keep-alive
    was answered alive within its TTL (less the clock drift bound) of its sending. Then
    :attr:`lost` is set, ``on_lost`` runs, every lock and leadership of the session is
    marked lost, and calls on the session raise :class:`~tenure.SessionLost`. A lost
    session stays lost: open a new one.
    """

    def __init__(self, client: Client, ttl: float, on_lost: Optional[Callable[["Session"], Any]]) -> None:
        self._client = client
        self.ttl = float(ttl)
        #: Set when the session is lost (see the class doc).
        self.lost = threading.Event()
        self._on_lost = on_lost
        self._locks: List["Lock"] = []
        self._holders: List[Any] = []  # leaderships
        self._guard = threading.Lock()
        self._driver = SessionDriver(client._t, self.ttl, self._lost)

    # -- state ---------------------------------------------------------------------------

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the session was lost (``None`` while it is not)."""
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
        """The conservative deadline (on :func:`time.monotonic`'s clock) until which the
        session, and everything it holds, is certainly alive; keep-alives move it on.
        ``None`` before the session opened."""
        return self._driver.safe_until()

    @property
    def alive(self) -> bool:
        """Whether the session is certainly alive now."""
        until = self.safe_until
        return (not self.lost.is_set() and not self._driver.closed
                and (until is None or time.monotonic() < until))

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "closed" if self._driver.closed else "alive"
        return f"<tenure.Session ttl={self.ttl} {state} store={self.store} id={self.id}>"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the session: its locks (in every store) are released at once (no
        lock-delay), its ephemeral objects deleted, its leaderships ended."""
        self._driver.close()
        with self._guard:
            locks, self._locks = self._locks, []
            holders, self._holders = self._holders, []
        for l in locks:
            l._released = True
        for h in holders:
            h._ended = True
        self._client._forget(self)

    # -- internals -----------------------------------------------------------------------

    def _lost(self, reason: str) -> None:
        self.lost.set()
        with self._guard:
            locks = list(self._locks)
            holders = list(self._holders)
        for l in locks:
            l._mark_lost(reason)
        for h in holders:
            h._mark_lost(reason)
        _call_back(self._on_lost, self, "the session")

    def _ref(self) -> pb.SessionRef:
        """The session's ref for a request of any store (opens it on first use)."""
        return self._driver.ref()

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

    def _confirm(self, name: str, release: Callable[[], Any]) -> None:
        """A grant is handed out only while the session is certainly alive: if its
        deadline is already near (a failover outlasted much of it), a keep-alive must
        extend it first, else the grant is given back."""
        until = self.safe_until
        warn = min(2.0, self.ttl / 2)
        if until is not None and until - time.monotonic() > warn and not self.lost.is_set():
            return
        limit = min(max(self.ttl / 3, 1.0), self._client.options.attempt_timeout)
        if not self.lost.is_set() and self._driver.confirm(limit):
            until = self.safe_until
            if until is not None and until - time.monotonic() > warn:
                return
        try:
            release()
        except TenureError:
            pass
        if self.lost.is_set():
            raise SessionLost(f"the session is lost: {self.lost_reason}")
        raise GrantUnconfirmed(
            f"{name} was granted too close to the session's deadline to be safe and was "
            "released", name=name)

    # -- locks ---------------------------------------------------------------------------

    def lock(self, name: str, *, shared: bool = False, timeout: Optional[float] = None,
             lock_delay: Optional[float] = None,
             on_lost: Optional[Callable[["Lock"], Any]] = None) -> "Lock":
        """Acquire lock ``name`` (a path), waiting in its FIFO queue.

        Args:
            shared: a shared (read) lock instead of an exclusive one.
            timeout: wait at most this long (seconds), then raise :class:`~tenure.Timeout`;
                ``None`` waits until granted (or the session is lost).
            lock_delay: if the session expires while holding the lock, nobody gets it for
                this long (seconds; default the server's, 1 s; 0 for locks whose users
                check fencing tokens).
            on_lost: called with the :class:`Lock` if the session is lost while it is held.

        Returns a :class:`Lock` (a context manager that releases it) carrying the fencing
        token. The acquire is retried across failovers with one request id, so it is
        granted at most once.
        """
        lock = self._acquire(name, shared=shared, timeout=timeout, no_wait=False,
                             lock_delay=lock_delay, on_lost=on_lost)
        assert lock is not None
        return lock

    def try_lock(self, name: str, *, shared: bool = False, lock_delay: Optional[float] = None,
                 on_lost: Optional[Callable[["Lock"], Any]] = None) -> Optional["Lock"]:
        """Acquire lock ``name`` if it is free now: the :class:`Lock`, or ``None`` when it
        is held (the server answered ``WouldBlock``)."""
        return self._acquire(name, shared=shared, timeout=None, no_wait=True,
                             lock_delay=lock_delay, on_lost=on_lost)

    def _acquire(self, name: str, *, shared: bool, timeout: Optional[float], no_wait: bool,
                 lock_delay: Optional[float], on_lost: Optional[Callable[["Lock"], Any]]) -> Optional["Lock"]:
        client = self._client
        opts = client.options
        store = client.store_of(name)
        ref = self._ref()
        rid = self._next_id()
        req = pb.AcquireRequest(
            session=ref, name=name,
            mode=pb.LOCK_MODE_SHARED if shared else pb.LOCK_MODE_EXCLUSIVE,
            no_wait=no_wait, request_id=rid)
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
            granted = client._t.call("tenure", "Acquire", req, cancel=self._cancel, **kwargs)
        except WouldBlock:
            if no_wait:
                return None
            raise
        except SessionExpired as e:
            self._raise_expired(e)
        except Timeout:
            raise
        except TenureError as e:
            if timeout is not None and not no_wait and e.retryable:
                what = "timed out" if name in e.message else f"timed out waiting for {name}"
                raise Timeout(f"{what} ({e.message})", name=name) from e
            raise
        lock = Lock(self, name, store, ref.id, shared, FencingToken._from_proto(granted.token),
                    on_lost)
        with self._guard:
            self._locks.append(lock)
        self._confirm(name, lambda: lock._release(quiet=True))
        if self.lost.is_set():  # lost between the grant and the registration
            lock._mark_lost(self.lost_reason or "session lost")
        return lock

    def _release(self, lock: "Lock") -> None:
        # The session's own ref (home store and id), whatever the lock's store.
        req = pb.ReleaseRequest(session=self._home(), name=lock.name, request_id=self._next_id(),
                                token=lock.token._to_proto())
        try:
            self._client._t.call("tenure", "Release", req)
        finally:
            with self._guard:
                if lock in self._locks:
                    self._locks.remove(lock)

    # -- elections -----------------------------------------------------------------------

    def election(self, name: str) -> "Any":
        """The election ``name`` (a path) for this session: campaign, proclaim, resign,
        leader, observe (:class:`tenure.elections.Election`)."""
        from .elections import Election
        return Election(self, name)


class Lock:
    """A held lock: its name, mode, fencing token, and whether it may be lost.

    Use it as a context manager (the lock is released on exit) or call :meth:`release`.
    Pass :attr:`token` to every resource the lock protects (or fence object writes with
    ``objects.put(..., fence=lock)``). :attr:`lost` is set, and ``on_lost(lock)`` runs,
    if the session is lost while the lock is held: stop using the lock then (by
    :attr:`safe_until` at the latest).
    """

    def __init__(self, session: Session, name: str, store: int, session_id: int, shared: bool,
                 token: FencingToken, on_lost: Optional[Callable[["Lock"], Any]]) -> None:
        self.session = session
        #: The lock's name.
        self.name = name
        #: The store of the lock's name.
        self.store = store
        #: The id of the session holding it (:attr:`Session.id`, of its home store; in
        #: another store the server holds the lock under the session's child there, which
        #: holder listings show).
        self.session_id = session_id
        #: Whether it is a shared lock.
        self.shared = shared
        #: The grant's fencing token.
        self.token = token
        #: Set if the session is lost while the lock is held.
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._on_lost = on_lost
        self._released = False

    def __repr__(self) -> str:
        mode = "shared" if self.shared else "exclusive"
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<tenure.Lock {self.name!r} {mode} token={self.token} {state}>"

    @property
    def safe_until(self) -> Optional[float]:
        """The conservative deadline (:func:`time.monotonic` clock) until which the lock
        is certainly held; keep-alives move it on."""
        return self.session.safe_until

    @property
    def held(self) -> bool:
        """Whether the lock is certainly held now (not released, not lost, before the
        deadline)."""
        until = self.safe_until
        return (not self._released and not self.lost.is_set() and until is not None
                and time.monotonic() < until)

    def _mark_lost(self, reason: str) -> None:
        if self._released or self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        _call_back(self._on_lost, self, f"lock {self.name}")

    def release(self) -> None:
        """Release the lock (retried across failovers with one request id, so a retry
        never releases anything else). Releasing a lock that is already released is a
        no-op; a lock whose session was lost raises :class:`~tenure.SessionLost`."""
        self._release(quiet=False)

    def _release(self, quiet: bool) -> None:
        if self._released:
            return
        if self.lost.is_set():
            self._released = True
            if quiet:
                return
            raise SessionLost(f"lock {self.name} was lost: {self.lost_reason}")
        self._released = True
        try:
            self.session._release(self)
        except (NotHeld, SessionExpired):
            pass
        except TenureError:
            if not quiet:
                raise

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A lost lock is not an error of the release; an error of the release does not
        # hide the body's exception.
        self._release(quiet=exc_type is not None or self.lost.is_set())
