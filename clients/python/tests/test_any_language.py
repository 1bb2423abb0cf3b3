"""The message sequences of docs/guide/any-language.md ("A guarded write", "A watch"),
driven with the generated stubs only (no client library), through a device that does not
manage the names' store. ("A lock", through a kill -9 of the manager, is the Rust process
test crates/tenure/tests/integration/any_device.rs, also with stubs only.)"""

from __future__ import annotations

import threading
import time
import uuid

import grpc

from tenure._proto import tenure_pb2 as pb
from tenure._proto import tenure_pb2_grpc as rpc

TIMEOUT = 10


def other_device(cluster, name: str) -> str:
    """An endpoint of a device that does not manage `name`'s store."""
    for ep in cluster.endpoints:
        with grpc.insecure_channel(ep) as ch:
            r = rpc.TenureStub(ch).Resolve(pb.ResolveRequest(name=name), timeout=TIMEOUT)
        if r.HasField("ok") and r.ok.endpoint and r.ok.endpoint != ep:
            return ep
    raise AssertionError(f"every device says it manages the store of {name}")


def put(objects, key, data, **kw) -> pb.PutObjectResponse:
    return objects.Put(pb.PutObjectRequest(key=key, data=data, **kw), timeout=TIMEOUT)


def test_a_guarded_write_with_stubs_only(cluster):
    ns = "/w" + uuid.uuid4().hex[:8]
    key, lock = f"{ns}/state", f"{ns}/lock"
    with grpc.insecure_channel(other_device(cluster, key)) as ch:
        objects, tenure = rpc.ObjectsStub(ch), rpc.TenureStub(ch)
        # 1. Get: no object yet.
        got = list(objects.Get(pb.GetObjectRequest(key=key), timeout=TIMEOUT))
        assert got[0].error.HasField("no_such_object"), got
        # 2. Create-only with if_revision 0, then a compare-and-set on the revision read.
        first = put(objects, key, b"v1", conditions=pb.WriteConditions(if_revision=0))
        assert first.HasField("ok"), first
        rev = first.ok.revision
        second = put(objects, key, b"v2", conditions=pb.WriteConditions(if_revision=rev))
        assert second.HasField("ok") and second.ok.revision > rev, second
        stale = put(objects, key, b"lost", conditions=pb.WriteConditions(if_revision=rev))
        assert stale.error.HasField("revision_mismatch"), stale
        assert stale.error.revision_mismatch.current == second.ok.revision
        assert "revision" in stale.error.message and "Some(" not in stale.error.message
        # A retry of the second put (same session and request id) is answered from its
        # first outcome, not written again.
        store = tenure.Resolve(pb.ResolveRequest(name=key), timeout=TIMEOUT).ok.store
        opened = tenure.OpenSession(pb.OpenSessionRequest(store=store, ttl_ms=10_000),
                                    timeout=TIMEOUT)
        session = opened.ok.session
        w = dict(session=session.id, request_id=7)
        once = put(objects, key, b"v3", **w)
        again = put(objects, key, b"v3", **w)
        assert once.ok.revision == again.ok.revision, (once, again)
        # 3. Fenced by a lock: accepted with the holder's token, refused once it moved on.
        granted = tenure.Acquire(pb.AcquireRequest(
            session=session, name=lock, mode=pb.LOCK_MODE_EXCLUSIVE, no_wait=True,
            request_id=8), timeout=TIMEOUT)
        token = granted.ok.token
        fence = pb.WriteConditions(fence=pb.Fence(lock=lock, token=token))
        assert put(objects, key, b"fenced", conditions=fence).HasField("ok")
        tenure.Release(pb.ReleaseRequest(session=session, name=lock, request_id=9,
                                         token=token), timeout=TIMEOUT)
        other = tenure.OpenSession(pb.OpenSessionRequest(store=store, ttl_ms=10_000),
                                   timeout=TIMEOUT).ok.session
        moved = tenure.Acquire(pb.AcquireRequest(
            session=other, name=lock, mode=pb.LOCK_MODE_EXCLUSIVE, no_wait=True,
            request_id=1), timeout=TIMEOUT)
        assert moved.HasField("ok"), moved
        refused = put(objects, key, b"late", conditions=fence)
        assert refused.error.HasField("stale_token"), refused
        for s in (session, other):
            tenure.CloseSession(pb.CloseSessionRequest(session=s), timeout=TIMEOUT)


def test_a_watch_with_stubs_only(cluster):
    ns = "/v" + uuid.uuid4().hex[:8]
    with grpc.insecure_channel(other_device(cluster, ns)) as ch:
        objects = rpc.ObjectsStub(ch)
        start = objects.List(pb.ListObjectsRequest(prefix=ns), timeout=TIMEOUT).ok.revision
        stream = objects.Watch(pb.WatchObjectsRequest(prefix=ns, after=start,
                                                      include_values=True), timeout=30)
        first = next(stream)
        assert first.HasField("watching") and first.watching.revision == start, first
        written = {}

        def writer():
            for i in range(5):
                r = put(objects, f"{ns}/k{i % 2}", f"value {i}".encode())
                written[r.ok.revision] = (f"{ns}/k{i % 2}", f"value {i}".encode())

        t = threading.Thread(target=writer)
        t.start()
        seen = {}
        deadline = time.monotonic() + 20
        for msg in stream:
            assert msg.HasField("events"), msg
            for c in msg.events.changes:
                assert c.revision not in seen, f"revision {c.revision} twice"
                assert not seen or c.revision > max(seen), "out of order"
                seen[c.revision] = (c.key, c.value)
            if len(seen) == 5 or time.monotonic() > deadline:
                break
        t.join()
        stream.cancel()
        assert seen == written
        # The connection broke (here: the stream was cancelled): watch again after the
        # last revision received, at any device; nothing is missed or repeated.
        last = max(seen)
        put(objects, f"{ns}/k9", b"after")
        with grpc.insecure_channel(cluster.endpoints[0]) as ch2:
            again = rpc.ObjectsStub(ch2).Watch(
                pb.WatchObjectsRequest(prefix=ns, after=last, include_values=True),
                timeout=30)
            assert next(again).watching.revision == last
            ev = next(again).events.changes
            assert [(c.key, c.value) for c in ev] == [(f"{ns}/k9", b"after")]
            again.cancel()
