"""A kill -9 of the manager of a held lock's store: the client keeps its session and its
lock (same token) through the failover and goes on talking."""

from __future__ import annotations

import os
import signal
import time

WAIT = 30.0


def test_kill_the_manager_of_a_held_locks_store(cluster, ns, capsys):
    name, key = f"{ns}/lock", f"{ns}/state"
    with cluster.client() as c, c.session(ttl=10) as s:
        lock = s.lock(name)
        token, session_id = lock.token, lock.session_id
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
        assert [(h.session, h.token) for h in holders] == [(session_id, token)]
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
    # Bring the device back for the tests that follow.
    cluster.up()
