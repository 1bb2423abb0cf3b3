"""Locks and sessions against a real cluster."""

from __future__ import annotations

import threading
import time

import pytest

import tenure
from tenure import errors
from tenure._proto import tenure_pb2 as pb

WAIT = 10.0  # every wait in these tests is bounded by this


def wait_until(pred, timeout=WAIT, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def test_lock_and_unlock_with_a_fencing_token(client, ns):
    name = f"{ns}/batch"
    with client.session(ttl=10) as s:
        with s.lock(name) as lock:
            assert isinstance(lock.token, tenure.FencingToken)
            assert lock.held and not lock.lost.is_set()
            assert lock.store == client.store_of(name) and lock.session_id == s.id
            state = client.holders(name)
            # Held in the name's store: by the session itself in its home store, else by
            # its child there.
            assert [(h.store, h.token, h.shared) for h in state.holders] == [
                (lock.store, lock.token, False)]
            if lock.store == s.store:
                assert state.holders[0].session == s.id
            first = lock.token
        assert not lock.held
        assert client.holders(name).holders == []
        # The next grant of the name carries a larger token.
        with s.lock(name) as again:
            assert again.token > first


def test_try_lock_answers_none_when_held(client, ns):
    name = f"{ns}/x"
    with client.session() as s1, client.session() as s2:
        held = s1.try_lock(name)
        assert held is not None
        assert s2.try_lock(name) is None
        # A shared lock is refused too while an exclusive one is held.
        assert s2.try_lock(name, shared=True) is None
        held.release()
        got = s2.try_lock(name)
        assert got is not None and got.token > held.token
        got.release()


def test_shared_locks_are_held_together(client, ns):
    name = f"{ns}/read"
    with client.session() as s1, client.session() as s2:
        with s1.lock(name, shared=True) as a, s2.lock(name, shared=True, timeout=5) as b:
            holders = client.holders(name).holders
            assert {(h.store, h.token) for h in holders} == {(a.store, a.token),
                                                              (b.store, b.token)}
            assert len({h.session for h in holders}) == 2
            assert all(h.shared for h in holders)
            with client.session() as s3:
                assert s3.try_lock(name) is None


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "timed"])
def test_a_second_session_waits_until_the_first_releases(client, ns, timed):
    name = f"{ns}/contended"
    with client.session() as s1, client.session() as s2:
        first = s1.lock(name)
        got = {}
        # Every attempt of an Acquire the waiter sends.
        sent = []
        invoke = client._t.invoke

        def counting(endpoint, service, method, request, *args, **kw):
            if method == "Acquire":
                sent.append(request.request_id)
            return invoke(endpoint, service, method, request, *args, **kw)

        client._t.invoke = counting

        def waiter():
            try:
                got["lock"] = s2.lock(name, timeout=WAIT if timed else None)
                got["at"] = time.monotonic()
            except Exception as e:  # reported below
                got["error"] = e

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        # The second session is queued behind the first.
        assert wait_until(lambda: client.holders(name).waiters != []), "never queued"
        assert "lock" not in got
        released_at = time.monotonic()
        first.release()
        t.join(WAIT)
        assert "error" not in got, got.get("error")
        second = got["lock"]
        assert second.token > first.token
        assert got["at"] - released_at < (1.0 if timed else 2.0)
        assert [h.token for h in client.holders(name).holders] == [second.token]
        # One request; a timed wait is one call (no re-sends while it waits).
        assert len(set(sent)) == 1
        if timed:
            assert len(sent) == 1, sent
        second.release()


def test_a_timed_wait_raises_timeout(client, ns):
    name = f"{ns}/busy"
    with client.session() as s1, client.session() as s2:
        with s1.lock(name):
            started = time.monotonic()
            with pytest.raises(tenure.Timeout) as info:
                s2.lock(name, timeout=0.5)
            assert 0.4 < time.monotonic() - started < 3.0
            # The server's message names the lock; the client does not name it again.
            text = str(info.value)
            assert text.startswith("timed out") and text.count(name) == 1, text
            assert info.value.name == name and isinstance(info.value, TimeoutError)


def test_a_stale_token_is_refused_by_a_fenced_put(client, ns):
    name, key = f"{ns}/lock", f"{ns}/state"
    with client.session() as s1, client.session() as s2:
        old = s1.lock(name)
        w = client.objects.put(key, b"from the first holder", fence=old)
        assert w.revision > 0
        old.release()
        new = s2.lock(name)
        assert new.token > old.token
        with pytest.raises(tenure.StaleToken) as info:
            client.objects.put(key, b"late write", fence=old)
        assert info.value.presented == old.token and info.value.current == new.token
        assert str(old.token) in str(info.value)
        # A (lock name, token) pair fences too.
        client.objects.put(key, b"from the second holder", fence=(name, new.token))
        assert client.objects.get(key).value == b"from the second holder"
        new.release()


def test_a_session_spans_stores(client, ns):
    names = [f"{ns}a/x", f"{ns}b/x", f"{ns}c/x", f"{ns}d/x"]
    opened = []
    invoke = client._t.invoke

    def counting(endpoint, service, method, request, *args, **kw):
        if method == "OpenSession":
            opened.append(request)
        return invoke(endpoint, service, method, request, *args, **kw)

    client._t.invoke = counting
    with client.session() as s:
        locks = [s.lock(n) for n in names]
        # One session (opened once, in a store the server chose) for every store.
        assert len(opened) == 1 and not opened[0].HasField("store")
        assert s.id is not None and s.store is not None
        assert {l.session_id for l in locks} == {s.id}
        for l in locks:
            assert [(h.store, h.token) for h in client.holders(l.name).holders] == [
                (l.store, l.token)]
        for l in locks:
            l.release()
            assert client.holders(l.name).holders == []


def name_in_other_store(client, ns, store, tries=200):
    """A name of ``ns`` (a variation of its first segment) in another store than ``store``."""
    for i in range(tries):
        name = f"{ns}o{i}/x"
        if client.store_of(name) != store:
            return name
    raise AssertionError(f"no name outside store {store} in {tries} tries")


@pytest.mark.parametrize("closed", ["home", "child"])
def test_losing_the_session_marks_its_locks_lost(client, cluster, ns, closed):
    name = f"{ns}/fragile"
    lost_calls = []
    with client.session(ttl=3, on_lost=lambda s: lost_calls.append(("session", s))) as s:
        lock = s.lock(name, on_lost=lambda l: lost_calls.append(("lock", l)))
        if closed == "home":
            # Someone (an operator, another process) ends the session under us.
            victim = pb.SessionRef(store=s.store, id=s.id)
        else:
            # ... or only its child in another store: the session is expired as a whole.
            other = s.lock(name_in_other_store(client, ns, s.store))
            [holder] = client.holders(other.name).holders
            assert holder.store == other.store != s.store
            victim = pb.SessionRef(store=holder.store, id=holder.session)
        # The next keep-alive answers SessionExpired.
        import grpc
        from tenure._proto import tenure_pb2_grpc
        with grpc.insecure_channel(cluster.endpoints[0]) as ch:
            r = tenure_pb2_grpc.TenureStub(ch).CloseSession(
                pb.CloseSessionRequest(session=victim), timeout=10)
            assert r.WhichOneof("result") == "ok"
        assert lock.lost.wait(WAIT), "the lock was not marked lost"
        assert s.lost.is_set() and not lock.held and not s.alive
        assert "expired" in s.lost_reason
        assert [k for k, _ in lost_calls] == ["lock", "session"] or \
            sorted(k for k, _ in lost_calls) == ["lock", "session"]
        with pytest.raises(tenure.SessionLost):
            s.lock(f"{ns}/other")
        with pytest.raises(tenure.SessionLost):
            lock.release()


def test_error_messages_read_as_sentences(client, ns):
    with client.session() as s:
        with pytest.raises(tenure.InvalidName) as info:
            s.lock("no-slash")
        assert str(info.value) == "invalid name \"no-slash\": name must start with '/'"
        with pytest.raises(tenure.Rejected) as info:
            s.lock(f"{ns}/x", lock_delay=100)
        assert "lock_delay" in str(info.value) and "60s" in str(info.value)
        with pytest.raises(tenure.Rejected):
            client.session(ttl=0.001).lock(f"{ns}/y")
    with pytest.raises(tenure.NoSuchObject) as info:
        client.objects.get(f"{ns}/missing")
    assert f"{ns}/missing" in str(info.value)


def test_lock_errors_name_the_lock_once(client, ns):
    name = f"{ns}/named"
    with client.session() as s1, client.session() as s2:
        lock = s1.lock(name)
        e = s2.election(f"{ns}/vote")
        leadership = e.campaign(b"me")
        with client.session() as s3:
            with pytest.raises(tenure.Timeout) as info:
                s3.election(f"{ns}/vote").campaign(b"too", timeout=0.3)
            assert str(info.value).count(f"{ns}/vote") == 1, str(info.value)
        # A release of a lock the session does not hold, on the wire: NotHeld names it.
        r = client._t.call("tenure", "Release", pb.ReleaseRequest(
            session=pb.SessionRef(store=s2.store, id=s2.id), name=name,
            request_id=s2._next_id()), collect=lambda x: x)
        err = errors.from_proto(r.error)
        assert isinstance(err, tenure.NotHeld) and str(err).count(name) == 1, str(err)
        r = client._t.call("tenure", "Acquire", pb.AcquireRequest(
            session=pb.SessionRef(store=s2.store, id=s2.id), name=name,
            no_wait=True, request_id=s2._next_id()), collect=lambda x: x)
        err = errors.from_proto(r.error)
        assert isinstance(err, tenure.WouldBlock) and str(err).count(name) == 1, str(err)
        leadership.resign()
        lock.release()
