"""The session's sans-IO core (no cluster): what it sends, when, and what answers do."""

from __future__ import annotations

import pytest

import tenure
from tenure._proto import tenure_pb2 as pb
from tenure._sessions import KeepAlive, Lost, SessionCore, Wait

TTL, DRIFT = 3.0, 0.05


def opened_core(sent=100.0, store=5, sid=42, endpoint="a:1"):
    core = SessionCore(TTL, tenure.Options(clock_drift=DRIFT, attempt_timeout=5.0))
    assert core.step(sent) is None and core.safe_until() is None  # nothing before it opens
    ok = pb.SessionOpened(session=pb.SessionRef(store=store, id=sid), ttl_ms=int(TTL * 1000))
    assert core.opened(ok, sent, endpoint)
    return core


def alive(ttl_ms=int(TTL * 1000)):
    return pb.KeepAliveResponse(ok=pb.SessionAlive(ttl_ms=ttl_ms))


def error(**kind):
    return pb.KeepAliveResponse(error=pb.Error(message="x", **kind))


def test_opens_without_a_store_and_keeps_one_ref():
    core = SessionCore(TTL, tenure.Options())
    req = core.open_request()
    assert not req.HasField("store") and req.ttl_ms == 3000 and req.request_id == 1
    core = opened_core()
    assert (core.home.store, core.home.id) == (5, 42)
    assert core.safe_until() == pytest.approx(100.0 + TTL - DRIFT)
    assert [core.next_request_id() for _ in range(3)] == [1, 2, 3]


def test_a_keep_alive_every_third_of_the_ttl_moves_the_deadline_from_its_send_time():
    core = opened_core()
    step = core.step(100.5)
    assert isinstance(step, Wait) and step.seconds == pytest.approx(0.5)
    step = core.step(101.0)
    assert step == KeepAlive("a:1", 1.0)  # at most a period, the attempt timeout above it
    assert core.answered(101.0, 101.2, "a:1", alive()) == (True, None)
    assert core.safe_until() == pytest.approx(101.0 + TTL - DRIFT)
    assert isinstance(core.step(101.3), Wait)
    assert isinstance(core.step(102.0), KeepAlive)


def test_a_keep_alive_never_outlasts_the_deadline():
    core = opened_core()
    deadline = core.safe_until()
    for _ in range(3):  # failures, retried soon
        now = core.next_at
        assert isinstance(core.step(now), KeepAlive)
        assert core.answered(now, now + 0.1, "a:1", err=tenure.ConnectionFailed("down")) == (
            False, None)
    step = core.step(deadline - 0.1)
    assert isinstance(step, KeepAlive) and step.timeout == pytest.approx(0.1)
    assert core.endpoint is None  # a device that did not answer: the router's choice
    lost = core.step(deadline)
    assert isinstance(lost, Lost) and "TTL" in lost.reason and core.lost
    assert core.step(deadline + 1) is None
    # A late answer changes nothing.
    assert core.answered(deadline - 0.1, deadline + 0.2, "b:1", alive()) == (False, None)
    with pytest.raises(tenure.SessionLost):
        core.check_usable()


def test_unavailable_stays_then_moves_and_not_manager_follows_its_hint():
    core = opened_core()
    for i in range(3):
        assert core.answered(101.0, 101.1, "a:1", error(unavailable=pb.Unavailable(store=5))) \
            == (False, None)
        assert core.endpoint == ("a:1" if i < 2 else None)
        assert core.next_at > 101.1
    assert core.answered(101.0, 101.2, "a:1",
                         error(not_manager=pb.NotManager(store=5, hint_endpoint="b:2"))) == (
        False, None)
    assert (core.endpoint, core.next_at) == ("b:2", 101.2)


def test_an_expired_answer_loses_the_session_once():
    core = opened_core()
    alive_, reason = core.answered(101.0, 101.1, "a:1",
                                   error(session_expired=pb.SessionExpired(session=7)))
    assert not alive_ and "expired" in reason and "session 42" in reason
    assert core.lost_reason == reason and core.step(101.2) is None
    assert core.expired("again") is None  # lost once
    assert core.begin_close() is None  # nothing left to close by the user


def test_close_then_nothing_more():
    core = opened_core()
    ref = core.begin_close()
    assert (ref.store, ref.id) == (5, 42) and core.begin_close() is None
    assert core.step(101.0) is None and core.lose("late") is None
    assert core.answered(101.0, 101.1, "a:1",
                         error(session_expired=pb.SessionExpired(session=42))) == (False, None)
    with pytest.raises(tenure.ClientClosed):
        core.check_usable()
    # Opened after a close: not kept (the caller closes it).
    late = SessionCore(TTL, tenure.Options())
    late.begin_close()
    assert not late.opened(pb.SessionOpened(session=pb.SessionRef(store=1, id=2)), 0.0, None)
