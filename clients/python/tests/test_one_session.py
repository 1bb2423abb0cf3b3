"""One session per client: a single server session (one OpenSession, one keep-alive loop)
holds locks, an ephemeral object and a leadership in several stores; the holders show its
children in the names' stores; closing it frees everything."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Dict, List

import pytest

import tenure
import tenure.aio

TTL = 3.0
WAIT = 10.0


def names_in_distinct_stores(store_of, ns: str, count: int, tries: int = 400) -> List[str]:
    """``count`` first segments (variations of ``ns``) in ``count`` different stores."""
    out: Dict[int, str] = {}
    for i in range(tries):
        seg = f"{ns}s{i}"
        store = store_of(f"{seg}/x")
        if store not in out:
            out[store] = seg
            if len(out) == count:
                return list(out.values())
    raise AssertionError(f"fewer than {count} stores among {tries} names")


def wait_until(pred, timeout=WAIT, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def test_one_session_holds_names_of_many_stores(cluster, ns, capsys):
    with cluster.client(deadline=30) as c:
        # Every keep-alive and every OpenSession this client sends.
        sent: List[tuple] = []
        opened: List[object] = []
        keep_alive_once, invoke = c._t.keep_alive_once, c._t.invoke

        def spy_keep_alive(endpoint, store, session, timeout):
            sent.append((time.monotonic(), store, session, threading.current_thread().name))
            return keep_alive_once(endpoint, store, session, timeout)

        def spy_invoke(endpoint, service, method, request, *args, **kw):
            if method == "OpenSession":
                opened.append(request)
            return invoke(endpoint, service, method, request, *args, **kw)

        c._t.keep_alive_once, c._t.invoke = spy_keep_alive, spy_invoke
        # Three lock stores, one for the ephemeral object, one for the election.
        segs = names_in_distinct_stores(c.store_of, ns, 5)
        lock_names = [f"{seg}/lock" for seg in segs[:3]]
        key, election = f"{segs[3]}/alive", f"{segs[4]}/leader"
        stores = [c.store_of(n) for n in lock_names + [key, election]]
        assert len(set(stores)) == 5

        s = c.session(ttl=TTL)
        locks = [s.lock(n) for n in lock_names]
        c.objects.put(key, b"here", ephemeral=True, session=s)
        lead = s.election(election).campaign(b"me")
        home = (s.store, s.id)
        assert len(opened) == 1 and not opened[0].HasField("store")
        assert None not in home

        # The holders: the session itself in its home store, its child in another one
        # (one child per store: the election's lock is the child's in its store too).
        child: Dict[int, int] = {}
        for l in locks:
            [h] = c.holders(l.name).holders
            assert (h.store, h.token) == (l.store, l.token)
            assert child.setdefault(h.store, h.session) == h.session
            if h.store == s.store:
                assert h.session == s.id
        [h] = c.holders(f"{election}/.election").holders
        assert (h.store, h.token) == (c.store_of(election), lead.token)
        if h.store == s.store:
            assert h.session == s.id
        # The leader record names the client's session (home store and id).
        leader = c.elections.leader(election)
        assert leader is not None and (leader.store, leader.session) == home
        assert leader.token == lead.token
        info = c.objects.head(key)
        assert info.owner_session is not None
        if c.store_of(key) == s.store:
            assert info.owner_session == s.id

        # One keep-alive loop keeps all of it for more than three TTLs.
        started = time.monotonic()
        first = s.safe_until
        while time.monotonic() - started < 3 * TTL + 0.5:
            assert s.alive and not s.lost.is_set(), s.lost_reason
            assert all(l.held for l in locks) and lead.is_leader
            time.sleep(0.25)
        assert s.safe_until > first + 2 * TTL
        for l in locks:
            assert [(h.store, h.token) for h in c.holders(l.name).holders] == [
                (l.store, l.token)]
        assert c.elections.leader(election).token == lead.token
        assert c.objects.get(key).value == b"here"
        during = [x for x in sent if x[0] >= started]
        assert {(store, sid) for _, store, sid, _ in during} == {home}
        assert {name for *_, name in during} == {"tenure-session"}
        # Every TTL/3: about nine in three TTLs (none in parallel, none missed).
        assert 7 <= len(during) <= 12, len(during)
        with capsys.disabled():
            print(f"\n[one session] home store {s.store}, session {s.id}: "
                  f"{len(during)} keep-alives in {time.monotonic() - started:.1f} s kept "
                  f"{len(locks)} locks, an object and a leadership in {len(set(stores))} "
                  "stores")

        # Closing it frees everything, in every store.
        s.close()
        assert all(not l.held for l in locks) and not lead.is_leader
        for l in locks:
            assert c.holders(l.name).holders == []
        assert c.elections.leader(election) is None
        assert c.holders(f"{election}/.election").holders == []

        def gone():
            try:
                c.objects.head(key)
                return False
            except tenure.NoSuchObject:
                return True

        assert wait_until(gone), "the ephemeral object outlived its session"
        # The names are free: another session takes them at once.
        with c.session() as other:
            for n in lock_names:
                assert other.try_lock(n) is not None


def test_one_asyncio_session_holds_names_of_many_stores(cluster, ns):
    with cluster.client() as sync:
        segs = names_in_distinct_stores(sync.store_of, ns, 4)

    async def main():
        async with tenure.aio.Client(cluster.endpoints) as c:
            opened = []
            invoke = c._t.invoke

            async def spy(endpoint, service, method, request, *args, **kw):
                if method == "OpenSession":
                    opened.append(request)
                return await invoke(endpoint, service, method, request, *args, **kw)

            c._t.invoke = spy
            lock_names = [f"{seg}/lock" for seg in segs[:3]]
            key = f"{segs[3]}/alive"
            s = c.session(ttl=TTL)
            locks = [await s.lock(n) for n in lock_names]
            await c.objects.put(key, b"here", ephemeral=True, session=s)
            assert len(opened) == 1 and not opened[0].HasField("store")
            assert {l.session_id for l in locks} == {s.id}
            for l in locks:
                [h] = (await c.holders(l.name)).holders
                assert (h.store, h.token) == (l.store, l.token)
                if h.store == s.store:
                    assert h.session == s.id
            first = s.safe_until
            await asyncio.sleep(2 * TTL + 0.5)
            assert s.alive and all(l.held for l in locks) and s.safe_until > first + TTL
            assert (await c.objects.get(key)).value == b"here"
            await s.close()
            for l in locks:
                assert (await c.holders(l.name)).holders == []
            end = time.monotonic() + WAIT
            while True:
                try:
                    await c.objects.head(key)
                except tenure.NoSuchObject:
                    break
                assert time.monotonic() < end, "the ephemeral object outlived its session"
                await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(main(), 60))

