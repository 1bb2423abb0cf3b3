"""The asyncio client's connections and its retry loop (on ``grpc.aio``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, Optional

import grpc
import grpc.aio

from .. import errors
from .._core import Credentials, Options, Plan, Router, channel_options, normalize_endpoint, unwrap
from .._proto import tenure_pb2
from .._transport import _STUBS
from ..errors import ClientClosed, DeadlineExceeded, TenureError


class _Conn:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.stubs: Dict[str, Any] = {}

    def stub(self, service: str) -> Any:
        s = self.stubs.get(service)
        if s is None:
            s = self.stubs[service] = _STUBS[service](self.channel)
        return s


class AsyncTransport:
    """One ``grpc.aio`` channel per endpoint (made on first use, in the running loop), the
    endpoint router, and ``call``: one RPC run under a retry plan."""

    def __init__(self, endpoints: list, creds: Credentials, opts: Options) -> None:
        self.opts = opts
        self.creds = creds
        self.router = Router(endpoints, opts.pass_over)
        self.metadata = creds.metadata()
        self._conns: Dict[str, _Conn] = {}
        self.closed = False

    def conn(self, endpoint: str) -> _Conn:
        endpoint = normalize_endpoint(endpoint)
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
                ch = grpc.aio.secure_channel(endpoint, cc, options=opts)
            else:
                ch = grpc.aio.insecure_channel(endpoint, options=opts)
            c = self._conns[endpoint] = _Conn(ch)
        return c

    def stub(self, endpoint: str, service: str) -> Any:
        return self.conn(endpoint).stub(service)

    async def close(self) -> None:
        self.closed = True
        conns, self._conns = self._conns, {}
        for c in conns.values():
            try:
                await c.channel.close(grace=None)
            except Exception:  # pragma: no cover - best effort
                pass

    def rpc_error(self, e: grpc.RpcError, endpoint: str) -> TenureError:
        if self.closed:
            return ClientClosed("the client is closed")
        return errors.from_rpc_error(e, endpoint, tls=self.creds.tls)

    async def sleep(self, seconds: float,
                    cancel: Optional[Callable[[], Optional[Exception]]] = None) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if self.closed:
                raise ClientClosed("the client is closed")
            if cancel is not None:
                e = cancel()
                if e is not None:
                    raise e
            await asyncio.sleep(min(left, 0.1))

    async def invoke(self, endpoint: str, service: str, method: str, request: Any,
                     timeout: float, collect: Optional[Callable[[Any], Any]] = None,
                     cancel: Optional[Callable[[], Optional[Exception]]] = None,
                     streaming: bool = False) -> Any:
        """One attempt at ``endpoint``. ``streaming``: a server-streaming call whose
        messages ``collect`` (an async function of the call) reads."""
        fn = getattr(self.stub(endpoint, service), method)
        req = request() if callable(request) else request
        try:
            if streaming:
                assert collect is not None
                call = fn(req, timeout=timeout, metadata=self.metadata)
                try:
                    return await collect(call)
                finally:
                    call.cancel()
            call = fn(req, timeout=timeout, metadata=self.metadata)
            if cancel is None:
                resp = await call
            else:
                task = asyncio.ensure_future(call)
                while True:
                    done, _ = await asyncio.wait({task}, timeout=0.1)
                    if done:
                        resp = task.result()
                        break
                    why = cancel() or (ClientClosed("the client is closed")
                                       if self.closed else None)
                    if why is not None:
                        call.cancel()
                        task.cancel()
                        raise why
            return (collect or unwrap)(resp)
        except grpc.RpcError as e:
            raise self.rpc_error(e, endpoint) from None
        except asyncio.CancelledError:
            raise

    async def call(self, service: str, method: str, request: Any, *,
                   deadline: Optional[float] = None, hint: Optional[str] = None,
                   attempt_timeout: Optional[float] = None, collect: Optional[Callable] = None,
                   cut_ok: bool = False, with_endpoint: bool = False, streaming: bool = False,
                   cancel: Optional[Callable[[], Optional[Exception]]] = None) -> Any:
        """See :meth:`tenure._transport.Transport.call`."""
        plan = Plan(self.router, self.opts, deadline=deadline, hint=hint,
                    attempt_timeout=attempt_timeout)
        while True:
            if self.closed:
                raise ClientClosed("the client is closed")
            target = plan.target
            try:
                result = await self.invoke(target, service, method, request, plan.timeout(),
                                           collect, cancel, streaming)
            except TenureError as e:
                cut = cut_ok and isinstance(e, DeadlineExceeded)
                delay = plan.failed(e, cut=cut)
                if delay > 0:
                    await self.sleep(delay, cancel)
                continue
            plan.succeeded()
            return (result, target) if with_endpoint else result

    async def keep_alive_once(self, endpoint: str, store: int, session: int,
                              timeout: float) -> Any:
        req = tenure_pb2.KeepAliveRequest(session=tenure_pb2.SessionRef(store=store, id=session))
        stub = self.stub(endpoint, "tenure")
        call = stub.KeepAlive(iter([req]), timeout=timeout, metadata=self.metadata)
        try:
            resp = await call.read()
        except grpc.RpcError as e:
            raise self.rpc_error(e, endpoint) from None
        finally:
            call.cancel()
        if resp is grpc.aio.EOF:
            raise errors.ConnectionFailed(f"the keep-alive stream at {endpoint} ended without "
                                          "an answer", endpoint=endpoint)
        return resp
