"""Server behaviour the client relies on, checked on the wire with the generated stubs (so
that the day the server changes, these say so)."""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import pytest

from tenure._proto import tenure_pb2 as pb
from tenure._proto import tenure_pb2_grpc


def answer(rpc, request):
    """The answer of a unary ``rpc``, the request sent again (same request id, as a client
    does) while the store is between managers (``Unavailable``)."""
    end = time.monotonic() + 15
    while True:
        r = rpc(request, timeout=10)
        if r.WhichOneof("result") == "error" and r.error.HasField("unavailable") \
                and time.monotonic() < end:
            time.sleep(0.1)
            continue
        return r


@pytest.mark.parametrize("through", ["manager", "another device"])
def test_a_timed_waiter_is_granted_when_the_lock_is_released(cluster, through):
    # The client sends a timed acquire once, with timeout_ms, and relies on the server to
    # grant it at the release (older servers granted a timed waiter only once its timer
    # fired, or once the lock was read again and the request re-sent).
    name = f"/srv{uuid.uuid4().hex[:8]}/lock"
    with grpc.insecure_channel(cluster.endpoints[0]) as ch:
        manager = tenure_pb2_grpc.TenureStub(ch).Resolve(pb.ResolveRequest(name=name),
                                                         timeout=10).ok.endpoint
    endpoint = manager if through == "manager" else next(
        e for e in cluster.endpoints if e != manager)
    with grpc.insecure_channel(endpoint) as ch:
        t = tenure_pb2_grpc.TenureStub(ch)
        store = t.Resolve(pb.ResolveRequest(name=name), timeout=10).ok.store
        s1, s2 = (answer(t.OpenSession, pb.OpenSessionRequest(store=store, ttl_ms=10000,
                                                              request_id=1)).ok.session
                  for _ in range(2))
        try:
            first = answer(t.Acquire, pb.AcquireRequest(
                session=s1, name=name, mode=pb.LOCK_MODE_EXCLUSIVE, request_id=2))
            assert first.HasField("ok"), first
            # Not released: the timed wait ends with Timeout, at its timeout, naming the lock.
            started = time.monotonic()
            r = answer(t.Acquire, pb.AcquireRequest(
                session=s2, name=name, mode=pb.LOCK_MODE_EXCLUSIVE, request_id=2,
                timeout_ms=300))
            waited = time.monotonic() - started
            assert r.WhichOneof("result") == "error" and r.error.HasField("timeout"), r
            assert r.error.timeout.name == name and r.error.message.count(name) == 1, r
            assert 0.25 < waited < 2.0, waited
            # Released while a timed waiter waits: granted at the release, not at its timer.
            released = {}

            def release() -> None:
                time.sleep(0.3)
                released["at"] = time.monotonic()
                released["answer"] = answer(
                    t.Release, pb.ReleaseRequest(session=s1, name=name, request_id=3))

            releaser = threading.Thread(target=release, daemon=True)
            releaser.start()
            r = answer(t.Acquire, pb.AcquireRequest(
                session=s2, name=name, mode=pb.LOCK_MODE_EXCLUSIVE, request_id=4,
                timeout_ms=5000))
            granted_at = time.monotonic()
            releaser.join(10)
            assert released["answer"].HasField("ok"), released["answer"]
            assert r.HasField("ok"), r
            assert r.ok.token.seq > first.ok.token.seq or r.ok.token.epoch > first.ok.token.epoch
            waited = granted_at - released["at"]
            assert waited < 1.0, f"granted {waited:.2f} s after the release (timer: 5 s)"
        finally:
            for s in (s1, s2):
                answer(t.CloseSession, pb.CloseSessionRequest(session=s))
