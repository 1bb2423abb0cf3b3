"""Errors map to typed exceptions with readable messages (no cluster needed)."""

from __future__ import annotations

import time

import grpc
import pytest

import tenure
from tenure import errors
from tenure._proto import tenure_pb2 as pb


def test_protocol_errors_map_to_typed_exceptions_with_their_fields():
    e = errors.from_proto(pb.Error(not_manager=pb.NotManager(store=3, hint_device=2,
                                                             hint_endpoint="127.0.0.1:9"),
                                   message="this device does not manage the store"))
    assert isinstance(e, tenure.NotManager) and e.retryable
    assert (e.store, e.hint_device, e.hint_endpoint) == (3, 2, "127.0.0.1:9")

    e = errors.from_proto(pb.Error(stale_token=pb.StaleToken(
        presented=pb.FencingToken(epoch=1, seq=1), current=pb.FencingToken(epoch=2, seq=5))))
    assert isinstance(e, tenure.StaleToken) and not e.retryable
    assert e.presented == tenure.FencingToken(1, 1) and e.current == tenure.FencingToken(2, 5)
    assert e.presented < e.current

    e = errors.from_proto(pb.Error(revision_mismatch=pb.RevisionMismatch(key="/a/b", current=7)))
    assert isinstance(e, tenure.RevisionMismatch) and e.current == 7
    assert str(e) == "object /a/b is at revision 7, not the revision expected"
    e = errors.from_proto(pb.Error(revision_mismatch=pb.RevisionMismatch(key="/a/b")))
    assert e.current is None and "does not exist" in str(e)

    e = errors.from_proto(pb.Error(unavailable=pb.Unavailable(store=4),
                                   message="store s4 is unavailable"))
    assert isinstance(e, tenure.Unavailable) and e.retryable and str(e) == "store s4 is unavailable"

    e = errors.from_proto(pb.Error(invalid_name=pb.InvalidName(name="x", reason="no slash")))
    assert isinstance(e, tenure.InvalidName) and isinstance(e, ValueError)

    e = errors.from_proto(pb.Error(timeout=pb.Timeout(name="/a"), message="timed out"))
    assert isinstance(e, TimeoutError) and str(e) == "timed out: /a"

    e = errors.from_lookup_proto(pb.LookupError(bad_interval=pb.BadInterval(
        got_ms=100000, min_ms=100, max_ms=2000), message="refresh interval 100s is out of range"))
    assert isinstance(e, tenure.BadInterval) and (e.got, e.min, e.max) == (100.0, 0.1, 2.0)
    assert errors.from_lookup_proto(pb.LookupError(no_leader=pb.NoLeader())).retryable


def test_lock_errors_name_the_lock_once():
    # Servers name the lock in these messages: the client does not name it again.
    for kind, cls, text in [("timeout", tenure.Timeout, "timed out: /a/b"),
                            ("would_block", tenure.WouldBlock, "lock is held: /a/b"),
                            ("not_held", tenure.NotHeld, "lock not held: /a/b"),
                            ("deadlock", tenure.Deadlock, "deadlock: /a/b")]:
        msg = pb.Error(message=text)
        getattr(msg, kind).name = "/a/b"
        e = errors.from_proto(msg)
        assert type(e) is cls and str(e) == text and e.name == "/a/b"
        # A message without the name (older servers) gets it once; no message: our own.
        msg.message = text.replace(": /a/b", "")
        assert str(errors.from_proto(msg)) == text
        msg.message = ""
        assert str(errors.from_proto(msg)).count("/a/b") == 1
    e = errors.from_proto(pb.Error(no_such_object=pb.NoSuchObject(key="/k"),
                                   message="no object /k"))
    assert str(e) == "no object /k"
    e = errors.from_proto(pb.Error(invalid_name=pb.InvalidName(
        name="/x", reason="/x belongs to store 7, not 0", store=7),
        message="/x belongs to store 7, not 0"))
    assert isinstance(e, tenure.InvalidName) and e.store == 7 and e.name == "/x"
    assert errors.from_proto(pb.Error(invalid_name=pb.InvalidName(name="x"))).store is None


def test_every_error_kind_has_an_exception():
    kinds = [f.name for f in pb.Error.DESCRIPTOR.oneofs_by_name["kind"].fields]
    for kind in kinds:
        msg = pb.Error(message="m")
        getattr(msg, kind).SetInParent()
        e = errors.from_proto(msg)
        assert isinstance(e, tenure.TenureError)
        assert type(e) is not tenure.RpcError, f"{kind} has no exception of its own"
    for kind in [f.name for f in pb.LookupError.DESCRIPTOR.oneofs_by_name["kind"].fields]:
        msg = pb.LookupError()
        getattr(msg, kind).SetInParent()
        assert type(errors.from_lookup_proto(msg)) is not tenure.RpcError, kind


class _Status(grpc.RpcError):
    def __init__(self, code, details, trailing=()):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


def test_grpc_statuses_map_to_exceptions():
    e = errors.from_rpc_error(_Status(grpc.StatusCode.UNAUTHENTICATED, "no token given"))
    assert isinstance(e, tenure.Unauthenticated) and not e.retryable
    e = errors.from_rpc_error(_Status(grpc.StatusCode.PERMISSION_DENIED, 'token "t" lacks lock'))
    assert isinstance(e, tenure.PermissionDenied) and '"t"' in str(e)
    e = errors.from_rpc_error(_Status(grpc.StatusCode.RESOURCE_EXHAUSTED, "device d1 is full",
                                      (("tenure-overloaded", "1"),)))
    assert isinstance(e, tenure.Overloaded) and e.retryable
    e = errors.from_rpc_error(_Status(grpc.StatusCode.RESOURCE_EXHAUSTED, "message too large"))
    assert isinstance(e, tenure.RpcError) and not e.retryable
    e = errors.from_rpc_error(_Status(grpc.StatusCode.UNAVAILABLE,
                                      "failed to connect to all addresses; last error: "
                                      "UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused"),
                              "127.0.0.1:1")
    assert isinstance(e, tenure.ConnectionFailed) and e.retryable
    assert str(e).startswith("cannot connect to the device at 127.0.0.1:1 (")
    assert "Connection refused" in str(e) and "is the cluster running?" in str(e)
    e = errors.from_rpc_error(_Status(grpc.StatusCode.UNIMPLEMENTED, ""), "h:1")
    assert isinstance(e, tenure.Unimplemented)


def test_an_unreachable_cluster_gives_up_within_the_deadline_and_says_why():
    # Port 1 on loopback: nothing listens, connections are refused at once.
    with tenure.Client(["127.0.0.1:1", "127.0.0.1:2"], deadline=1.5) as c:
        started = time.monotonic()
        with pytest.raises(tenure.ConnectionFailed) as info:
            c.resolve("/a/b")
        took = time.monotonic() - started
    assert took < 5, took
    text = str(info.value)
    assert "cannot connect to the device at 127.0.0.1:" in text, text
    assert "gave up after" in text and "attempts" in text, text
    assert "Traceback" not in text and "grpc" not in text.lower(), text


def test_endpoints_and_tokens_are_checked():
    with pytest.raises(ValueError):
        tenure.Client([])
    with pytest.raises(ValueError, match="token"):
        tenure.Client(["127.0.0.1:1"], token="two words")
    with pytest.raises(ValueError, match="CA certificate"):
        tenure.Client(["127.0.0.1:1"], tls_ca="/nonexistent/ca.pem")
    c = tenure.Client("http://127.0.0.1:1,127.0.0.1:2")
    assert c.endpoints == ["127.0.0.1:1", "127.0.0.1:2"]
    c.close()


def test_fencing_tokens_compare_as_epoch_then_seq():
    a, b, c = tenure.FencingToken(2, 9), tenure.FencingToken(3, 1), tenure.FencingToken(3, 2)
    assert a < b < c and max([b, a, c]) == c
    assert str(c) == "3.2" and tenure.FencingToken.parse("3.2") == c
