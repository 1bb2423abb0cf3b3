"""The sync client's connections and its retry loop (on ``grpc``, blocking)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Optional

import grpc

from . import errors
from ._core import Credentials, Options, Plan, Router, channel_options, normalize_endpoint, unwrap
from ._proto import (
    cluster_pb2_grpc,
    elections_pb2_grpc,
    snapshots_pb2_grpc,
    tenure_pb2,
    tenure_pb2_grpc,
)
from .errors import ClientClosed, DeadlineExceeded, TenureError

_STUBS = {
    "tenure": tenure_pb2_grpc.TenureStub,
    "objects": tenure_pb2_grpc.ObjectsStub,
    "lookup": tenure_pb2_grpc.LookupStub,
    "elections": elections_pb2_grpc.ElectionsStub,
    "cluster": cluster_pb2_grpc.ClusterStub,
    "snapshots": snapshots_pb2_grpc.SnapshotsStub,
}


class _Conn:
    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.stubs: Dict[str, Any] = {}

    def stub(self, service: str) -> Any:
        s = self.stubs.get(service)
        if s is None:
            s = self.stubs[service] = _STUBS[service](self.channel)
        return s


class Transport:
    """One channel per endpoint (made on first use), the endpoint router, and ``call``:
    one RPC run under a :class:`~tenure._core.Plan` (redirects followed, failovers and dead
    devices retried with backoff, all within the call's deadline)."""

    def __init__(self, endpoints: list, creds: Credentials, opts: Options) -> None:
        self.opts = opts
        self.creds = creds
        self.router = Router(endpoints, opts.pass_over)
        self.metadata = creds.metadata()
        self._conns: Dict[str, _Conn] = {}
        self._lock = threading.Lock()
        self.closed = False
        self._closed_event = threading.Event()

    # -- connections ---------------------------------------------------------------------

    def conn(self, endpoint: str) -> _Conn:
        endpoint = normalize_endpoint(endpoint)
        with self._lock:
            if self.closed:
                raise ClientClosed("the client is closed")
            c = self._conns.get(endpoint)
            if c is None:
                opts = channel_options(self.creds)
                if self.creds.tls:
                    cc = grpc.ssl_channel_credentials(
                        root_certificates=self.creds.root_certificates,
                        private_key=self.creds.private_key,
                        certificate_chain=self.creds.certificate_chain,
                    )
                    ch = grpc.secure_channel(endpoint, cc, options=opts)
                else:
                    ch = grpc.insecure_channel(endpoint, options=opts)
                c = self._conns[endpoint] = _Conn(ch)
            return c

    def stub(self, endpoint: str, service: str) -> Any:
        return self.conn(endpoint).stub(service)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            conns, self._conns = self._conns, {}
        self._closed_event.set()
        for c in conns.values():
            try:
                c.channel.close()
            except Exception:  # pragma: no cover - best effort
                pass

    def sleep(self, seconds: float, cancel: Optional[Callable[[], Optional[Exception]]] = None) -> None:
        """Sleep, waking early (and raising) when the client closes or ``cancel`` says."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if self._closed_event.wait(min(left, 0.1)):
                raise ClientClosed("the client is closed")
            if cancel is not None:
                e = cancel()
                if e is not None:
                    raise e

    # -- calls ---------------------------------------------------------------------------

    def rpc_error(self, e: grpc.RpcError, endpoint: str) -> TenureError:
        if self.closed:
            return ClientClosed("the client is closed")
        return errors.from_rpc_error(e, endpoint, tls=self.creds.tls)

    def invoke(self, endpoint: str, service: str, method: str, request: Any, timeout: float,
               collect: Optional[Callable[[Any], Any]] = None,
               cancel: Optional[Callable[[], Optional[Exception]]] = None) -> Any:
        """One attempt at ``endpoint``: the answer (through ``collect``, default
        :func:`unwrap`), or a :class:`TenureError`."""
        fn = getattr(self.stub(endpoint, service), method)
        req = request() if callable(request) else request
        collect = collect or unwrap
        try:
            if cancel is None:
                resp = fn(req, timeout=timeout, metadata=self.metadata)
            else:
                fut = fn.future(req, timeout=timeout, metadata=self.metadata)
                while True:
                    try:
                        resp = fut.result(timeout=0.1)
                        break
                    except grpc.FutureTimeoutError:
                        why = cancel() or (ClientClosed("the client is closed")
                                           if self.closed else None)
                        if why is not None:
                            fut.cancel()
                            raise why from None
            return collect(resp)
        except grpc.RpcError as e:
            raise self.rpc_error(e, endpoint) from None

    def call(self, service: str, method: str, request: Any, *,
             deadline: Optional[float] = None, hint: Optional[str] = None,
             attempt_timeout: Optional[float] = None, collect: Optional[Callable] = None,
             cut_ok: bool = False, with_endpoint: bool = False,
             cancel: Optional[Callable[[], Optional[Exception]]] = None) -> Any:
        """Run one request to completion under a retry plan.

        ``request`` is a message, or a callable making a fresh one (a request iterator
        for client-streaming calls). ``deadline`` bounds the whole call (default the
        client's), ``attempt_timeout`` one attempt; with ``cut_ok`` an attempt cut by
        its timeout is retried at once at the same device (a long wait goes on).
        ``cancel`` is polled during waits: an exception it returns is raised. With
        ``with_endpoint`` the answer comes as ``(answer, endpoint that answered)``.
        """
        plan = Plan(self.router, self.opts, deadline=deadline, hint=hint,
                    attempt_timeout=attempt_timeout)
        while True:
            if self.closed:
                raise ClientClosed("the client is closed")
            target = plan.target
            try:
                result = self.invoke(target, service, method, request, plan.timeout(),
                                     collect, cancel)
            except TenureError as e:
                cut = cut_ok and isinstance(e, DeadlineExceeded)
                delay = plan.failed(e, cut=cut)
                if delay > 0:
                    self.sleep(delay, cancel)
                continue
            plan.succeeded()
            return (result, target) if with_endpoint else result

    def keep_alive_once(self, endpoint: str, store: int, session: int, timeout: float) -> Any:
        """One keep-alive on a one-shot ``KeepAlive`` stream: the ``KeepAliveResponse``, or
        a :class:`TenureError` for a transport failure."""
        req = tenure_pb2.KeepAliveRequest(session=tenure_pb2.SessionRef(store=store, id=session))
        stub = self.stub(endpoint, "tenure")
        try:
            call = stub.KeepAlive(iter([req]), timeout=timeout, metadata=self.metadata)
            for resp in call:
                call.cancel()
                return resp
        except grpc.RpcError as e:
            raise self.rpc_error(e, endpoint) from None
        raise errors.ConnectionFailed(f"the keep-alive stream at {endpoint} ended without an "
                                      "answer", endpoint=endpoint)
