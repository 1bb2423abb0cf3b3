"""The asyncio API against a real cluster."""

from __future__ import annotations

import asyncio

import pytest

import tenure
import tenure.aio


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_lock_and_object_round_trip(cluster, ns):
    async def main():
        async with tenure.aio.Client(cluster.endpoints) as c:
            async with c.session(ttl=10) as s, c.session() as other:
                async with s.lock(f"{ns}/lock") as lock:
                    assert isinstance(lock.lost, asyncio.Event) and lock.held
                    assert await other.try_lock(f"{ns}/lock") is None
                    w = await c.objects.put(f"{ns}/state", b"v1", fence=lock)
                    obj = await c.objects.get(f"{ns}/state")
                    assert obj.value == b"v1" and obj.revision == w.revision
                    with pytest.raises(tenure.RevisionMismatch):
                        await c.objects.put(f"{ns}/state", b"v2", if_revision=w.revision + 9)
                    await c.objects.put(f"{ns}/state", b"v2", if_revision=w.revision)
                    token = lock.token
                # Released on exit: the other session gets it, with a larger token.
                lock2 = await other.lock(f"{ns}/lock", timeout=5)
                assert lock2.token > token
                with pytest.raises(tenure.StaleToken):
                    await c.objects.put(f"{ns}/state", b"late", fence=lock)
                await lock2.release()
            # The keep-alive task keeps a short session (and its lock) alive past its TTL.
            async with c.session(ttl=1.5) as short:
                lock = await short.lock(f"{ns}/short")
                first = short.safe_until
                await asyncio.sleep(2.0)
                assert lock.held and not short.lost.is_set() and short.safe_until > first + 1
            assert (await c.objects.list(f"{ns}")).keys() == [f"{ns}/state"]
            await c.objects.delete(f"{ns}/state")
            with pytest.raises(tenure.NoSuchObject):
                await c.objects.get(f"{ns}/state")
    run(main())


def test_elections_lookup_and_watch(cluster, ns):
    async def main():
        async with tenure.aio.Client(cluster.endpoints) as c:
            async with c.elections.observe(f"{ns}/e") as obs:
                assert (await obs.next(timeout=10)).leader is None
                async with c.session() as s:
                    async with s.election(f"{ns}/e").campaign(b"me") as lead:
                        change = await obs.next(timeout=10)
                        assert change.leader.token == lead.token
                        assert (await c.elections.leader(f"{ns}/e")).value == b"me"
                assert (await obs.next(timeout=10)).leader is None
            async with c.lookup.publish(f"{ns}/svc/1", b"addr", interval=0.3):
                await asyncio.sleep(0.8)
                assert (await c.lookup.get(f"{ns}/svc/1")).value == b"addr"
            assert await c.lookup.get(f"{ns}/svc/1") is None
            async with c.objects.watch(f"{ns}/w", include_values=True) as watch:
                w = await c.objects.put(f"{ns}/w/a", b"x")
                ch = await watch.next(timeout=10)
                assert (ch.key, ch.revision, ch.value) == (f"{ns}/w/a", w.revision, b"x")
    run(main())
