"""Kill -9s of devices: the manager of a held lock's store (the client keeps its session
and its lock, same token, through the failover and goes on talking), the manager of a
session's home store (the session and its locks in every store survive), the manager of a
watched store (a watch through another device does not notice), and the device a watch
talks to (the watch resumes at another device: no gap, no duplicate)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

import tenure
import tenure.aio

WAIT = 30.0


def test_kill_the_manager_of_a_held_locks_store(cluster, ns, capsys):
    name, key = f"{ns}/lock", f"{ns}/state"
    try:
        with cluster.client() as c, c.session(ttl=10) as s:
            lock = s.lock(name)
            token = lock.token
            held_by = [(h.store, h.session, h.token) for h in c.holders(name).holders]
            assert held_by and held_by[0][2] == token
            c.objects.put(key, b"before", fence=lock)
            manager = c.resolve(name).endpoint
            assert manager
            # Talk to the manager itself, so that the client has to move too.
            c._t.router.succeeded(manager)
            pid = cluster.device_at(manager)["pid"]
            before = s.safe_until
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            # The first call after the kill: a write fenced by the lock — the lock is still
            # held, with the same token, at the new manager.
            w = c.objects.put(key, b"after the failover", fence=lock)
            took = time.monotonic() - killed
            with capsys.disabled():
                print(f"\n[failover] first successful call after kill -9 of the manager "
                      f"{manager}: {took:.3f} s (a fenced put, token {token})")
            assert c.objects.get(key).value == b"after the failover" and w.revision > 0
            assert not lock.lost.is_set() and not s.lost.is_set() and lock.token == token
            holders = c.holders(name).holders
            assert [(h.store, h.session, h.token) for h in holders] == held_by
            new_manager = c.resolve(name).endpoint
            assert new_manager and new_manager != manager
            # The keep-alives reach the new manager: the session's deadline moves on.
            deadline = time.monotonic() + WAIT
            while s.safe_until <= before + 1.0:
                assert time.monotonic() < deadline, "no keep-alive answered after the failover"
                assert not s.lost.is_set(), s.lost_reason
                time.sleep(0.05)
            assert lock.held
            lock.release()
            assert c.holders(name).holders == []
    finally:
        # Bring the device back for the tests that follow.
        cluster.restore()


def _names_by_store(c, ns):
    """A lock name per store (variations of ``ns``'s first segment) and each store's
    manager's endpoint."""
    count = c.status().stores
    names, managers = {}, {}
    for i in range(50 * count):
        name = f"{ns}f{i}/lock"
        r = c.resolve(name)
        if r.store not in names:
            names[r.store], managers[r.store] = name, r.endpoint
            if len(names) == count:
                break
    return names, managers


def _segment(name):
    return name.rsplit("/", 1)[0]


def test_kill_the_manager_of_a_sessions_home_store(cluster, ns, capsys):
    # One session holds locks in its home store, in another store of the same device
    # (when it manages one) and in stores of the other devices (under its children
    # there); the device managing the home store is killed (-9) while the client talks to
    # it. The session must survive (its keep-alives renew home and every child at the new
    # managers), every lock stays held by it with its token, and a new lock in a store of
    # the killed device is granted once its store has a new manager.
    ttl = 10.0
    try:
        with cluster.client() as c, c.session(ttl=ttl) as s:
            names, managers = _names_by_store(c, ns)
            assert None not in managers.values(), managers
            held = {next(iter(names)): s.lock(next(iter(names.values())))}
            home = s.store
            victim = managers[home]
            victim_stores = [st for st, m in managers.items() if m == victim]
            chosen = [home] + [st for st in victim_stores if st != home][:1]
            # Stores of the other devices, one per device first.
            seen = set()
            for st, m in sorted(managers.items()):
                if m != victim and m not in seen:
                    seen.add(m)
                    chosen.append(st)
            chosen += [st for st, m in sorted(managers.items())
                       if m != victim and st not in chosen][:1]
            for st in chosen:
                if st not in held:
                    held[st] = s.lock(names[st])
            locks = [held[st] for st in chosen]
            assert len({managers[l.store] for l in locks}) >= 2
            before = {l.name: [(h.store, h.session, h.token) for h in c.holders(l.name).holders]
                      for l in locks}
            for l in locks:
                assert [(st, tok) for st, _, tok in before[l.name]] == [(l.store, l.token)]
            assert before[names[home]][0][1] == s.id  # the home store's: the session itself
            targets = [names[home]] + [names[st] for st in victim_stores if st != home][:1]

            c._t.router.succeeded(victim)  # the client talks to the device that dies
            pid = cluster.device_at(victim)["pid"]
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            # New locks in the killed device's stores (the home store first).
            grants = []
            for name in targets:
                new = s.lock(f"{_segment(name)}/after", timeout=30)
                grants.append((c.store_of(name), time.monotonic() - killed))
                assert not new.lost.is_set()
                locks.append(new)
            # The first keep-alive sent after the kill and answered alive.
            while s.safe_until <= killed + ttl - c.options.clock_drift:
                assert not s.lost.is_set(), s.lost_reason
                assert time.monotonic() - killed < ttl, "no keep-alive answered alive in a TTL"
                time.sleep(0.02)
            renewed = time.monotonic() - killed
            # Past the TTL that ran at the kill: the session was never lost.
            while time.monotonic() < killed + ttl + 1.0:
                assert not s.lost.is_set(), s.lost_reason
                time.sleep(0.1)
            assert s.alive and all(l.held and not l.lost.is_set() for l in locks)
            after = {name: [(h.store, h.session, h.token) for h in c.holders(name).holders]
                     for name in before}
            kept = sum(after[n] == before[n] for n in before)
            held_stores = [c.store_of(n) for n in before]
            new_manager = c.resolve(names[home]).endpoint
            with capsys.disabled():
                print(f"\n[failover] kill -9 of {victim} (managing the session's home store "
                      f"{home} and stores {sorted(victim_stores)}), session ttl {ttl:.0f} s: "
                      + ", ".join(f"new lock in store {st} granted after {t:.3f} s"
                                  for st, t in grants)
                      + f"; first keep-alive answered alive after {renewed:.3f} s; "
                      f"{kept}/{len(before)} locks (stores {held_stores}) "
                      f"still held by the session with their tokens; home now at {new_manager}")
            assert after == before
            assert new_manager and new_manager != victim
            assert grants[0][1] < 15.0
            for l in locks:
                l.release()
                assert c.holders(l.name).holders == []
    finally:
        cluster.restore()


def _other(c, endpoint):
    return next(e for e in c.endpoints if e != endpoint)


def _put(c, key, i):
    value = f"value {i} of {key}".encode() * (i + 1)
    return c.objects.put(key, value), value


def _expect_exactly(watch, written, take):
    """The watch delivers the changes of ``written`` (``(ObjectWritten, value)`` pairs),
    each once, in order, with its value, and nothing else. A change sent after its key
    was written again carries no value (the proto's `value`: "not yet replaced when the
    change was sent"): a watch that resumes after a failover may reach such changes only
    once the later writes are done; every other change carries its own value."""
    got = [take(WAIT) for _ in written]
    assert [(ch.revision, ch.key, ch.deleted) for ch in got] == \
        [(w.revision, w.key, False) for w, _ in written]
    for i, (ch, (w, v)) in enumerate(zip(got, written)):
        replaced = any(later.key == w.key for later, _ in written[i + 1:])
        if ch.value is None:
            assert replaced, f"revision {w.revision} ({w.key}) came without its value"
        else:
            assert ch.value == v, f"revision {w.revision} ({w.key}): another value"
    assert [ch.revision for ch in got] == sorted({w.revision for w, _ in written})
    return got


def test_a_watch_through_another_device_sees_every_revision_across_a_manager_failover(
        cluster, ns):
    prefix = f"{ns}/w"
    try:
        with cluster.client() as c:
            manager = c.resolve(prefix).endpoint
            other = _other(c, manager)
            # The watch (and the writes) go through a device that does not manage the store.
            c._t.router.succeeded(other)
            with c.objects.watch(prefix, include_values=True) as watch:
                assert watch.endpoint == other
                written = [_put(c, f"{prefix}/k{i}", i) for i in range(4)]
                os.kill(cluster.device_at(manager)["pid"], signal.SIGKILL)
                written += [_put(c, f"{prefix}/k{i % 3}", i) for i in range(4, 9)]
                assert c.resolve(prefix).endpoint not in (manager, None)

                def take(timeout):
                    try:
                        return watch.next(timeout=timeout)
                    except TimeoutError:
                        raise AssertionError(f"the watch stopped after revision "
                                             f"{watch.revision}") from None

                _expect_exactly(watch, written, take)
                with pytest.raises(TimeoutError):
                    watch.next(timeout=0.5)  # no duplicate after the last one
                # The failover did not show on the stream: it was never opened again.
                assert (watch.endpoint, watch.resumptions) == (other, 0)
    finally:
        cluster.restore()


def test_a_watch_resumes_at_another_device_when_its_device_dies(cluster, ns):
    # Two watches (the sync API's and the asyncio API's) talk to a device that does not
    # manage the store (their changes come by forwarded polls), and the writes go to the
    # manager. The device is killed right after writes it has likely not passed on yet:
    # the watches must get them from another device, after the last revision received.
    prefix = f"{ns}/w"
    try:
        with cluster.client() as c:
            manager = c.resolve(prefix).endpoint
            victim = _other(c, manager)
            c._t.router.succeeded(victim)
            ready, aio = threading.Event(), {}
            helper = threading.Thread(target=_aio_watch, daemon=True,
                                      args=(cluster.endpoints, victim, prefix, ready, 10, aio))
            helper.start()
            with c.objects.watch(prefix, include_values=True) as watch:
                assert watch.endpoint == victim
                assert ready.wait(WAIT) and aio["endpoint"] == victim, aio
                sent = []
                request = watch._request

                def spy():
                    r = request()
                    sent.append(r.after if r.HasField("after") else None)
                    return r

                watch._request = spy
                c._t.router.succeeded(manager)

                def take(timeout):
                    return watch.next(timeout=timeout)

                written = [_put(c, f"{prefix}/k{i}", i) for i in range(4)]
                first = _expect_exactly(watch, written[:2], take)
                written += [_put(c, f"{prefix}/k{i}", i) for i in range(4, 8)]
                os.kill(cluster.device_at(victim)["pid"], signal.SIGKILL)
                written += [_put(c, f"{prefix}/k{i}", i) for i in range(8, 10)]
                rest = _expect_exactly(watch, written[2:], take)
                assert [ch.revision for ch in first + rest] == [w.revision for w, _ in written]
                with pytest.raises(TimeoutError):
                    watch.next(timeout=0.5)
                assert watch.endpoint != victim and watch.resumptions >= 1
                # Opened again after the last revision received before the kill (one of
                # the first eight writes), never from "now".
                assert len(sent) == watch.resumptions and None not in sent, sent
                assert sent[0] in {w.revision for w, _ in written[1:8]}, (sent, written)
            helper.join(WAIT + 5)
            assert "error" not in aio, aio.get("error")
            assert [(ch.revision, ch.key, ch.value) for ch in aio["changes"]] == \
                [(w.revision, w.key, v) for w, v in written]
            assert not aio["extra"]
            endpoint, resumptions = aio["resumed"]
            assert endpoint != victim and resumptions >= 1
    finally:
        cluster.restore()


def _aio_watch(endpoints, victim, prefix, ready, count, out):
    """A watch of the asyncio API at ``victim`` (in its own thread and event loop): the
    first ``count`` changes into ``out``."""
    async def main():
        async with tenure.aio.Client(endpoints) as c:
            c._t.router.succeeded(victim)
            async with c.objects.watch(prefix, include_values=True) as w:
                out["endpoint"] = w.endpoint
                ready.set()
                out["changes"] = [await w.next(timeout=WAIT) for _ in range(count)]
                try:
                    await w.next(timeout=0.5)
                    out["extra"] = True
                except TimeoutError:
                    out["extra"] = False
                out["resumed"] = (w.endpoint, w.resumptions)

    try:
        asyncio.run(asyncio.wait_for(main(), 2 * WAIT))
    except BaseException as e:  # reported by the test
        out["error"] = e
    finally:
        ready.set()
