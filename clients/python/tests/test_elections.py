"""Elections against a real cluster."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

import tenure
from tenure._proto import elections_pb2 as epb
from tenure._proto import elections_pb2_grpc
from tenure._proto import tenure_pb2 as pb


def test_leader_and_observe(client, ns):
    name = f"{ns}/leaders/app"
    with client.elections.observe(name) as obs:
        first = obs.next(timeout=10)
        assert first.leader is None
        with client.session() as s1, client.session() as s2:
            e1, e2 = s1.election(name), s2.election(name)
            lead = e1.campaign(b"10.0.0.1:80")
            assert lead.is_leader and lead.value == b"10.0.0.1:80"
            change = obs.next(timeout=10)
            assert change.leader is not None and change.leader.value == b"10.0.0.1:80"
            assert change.leader.token == lead.token
            leader = client.elections.leader(name)
            assert leader == lead.leader and e2.leader() == leader
            # Another candidate cannot lead now.
            assert e2.try_campaign(b"other") is None
            with pytest.raises(tenure.Timeout):
                e2.campaign(b"other", timeout=0.3)
            # A new value, same leadership.
            e1.proclaim(b"10.0.0.1:81")
            change = obs.next(timeout=10)
            assert change.leader.value == b"10.0.0.1:81" and change.leader.token == lead.token
            # Fenced by the leadership.
            client.objects.put(f"{ns}/leaders/state", b"by the leader", fence=lead)
            assert lead.resign() is True
            assert obs.next(timeout=10).leader is None
            # The next candidate leads, with a larger token.
            with e2.campaign(b"second", timeout=10) as lead2:
                assert lead2.token > lead.token
                change = obs.next(timeout=10)
                assert change.leader.value == b"second"
                with pytest.raises(tenure.StaleToken):
                    client.objects.put(f"{ns}/leaders/state", b"deposed", fence=lead)
            assert obs.next(timeout=10).leader is None


def test_observing_through_a_device_that_does_not_manage_the_store(cluster, ns):
    name = f"{ns}/leaders/svc"
    with cluster.client() as c:
        manager = c.resolve(name).endpoint
        other = next(e for e in c.endpoints if e != manager)
        c._t.router.succeeded(other)
        with c.elections.observe(name) as obs, c.session() as s1, c.session() as s2:
            assert obs.endpoint == other
            assert obs.next(timeout=10).leader is None
            seen = []
            lead = s1.election(name).campaign(b"first")
            seen.append(obs.next(timeout=10))
            lead.proclaim(b"first, again")
            seen.append(obs.next(timeout=10))
            lead.resign()
            seen.append(obs.next(timeout=10))
            with s2.election(name).campaign(b"second", timeout=10) as lead2:
                seen.append(obs.next(timeout=10))
            seen.append(obs.next(timeout=10))
            assert [ch.leader.value if ch.leader else None for ch in seen] == [
                b"first", b"first, again", None, b"second", None]
            assert seen[1].leader.token == lead.token and seen[3].leader.token == lead2.token
            revisions = [ch.revision for ch in seen]
            assert revisions == sorted(set(revisions))
            # Served there all along: the stream never ended, nor moved.
            assert (obs.endpoint, obs.resumptions) == (other, 0)


def test_an_observation_follows_a_not_manager_hint(cluster, ns):
    # Servers today serve observations at any device; should one answer NotManager, the
    # observation goes where its hint says. A stand-in device that only redirects:
    name = f"{ns}/leaders/hinted"
    real = cluster.endpoints[0]

    class Redirect(elections_pb2_grpc.ElectionsServicer):
        def Observe(self, request, context):
            yield epb.ObserveResponse(error=pb.Error(
                not_manager=pb.NotManager(store=0, hint_endpoint=real),
                message="this device does not manage the store"))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    elections_pb2_grpc.add_ElectionsServicer_to_server(Redirect(), server)
    stand_in = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        with tenure.Client([stand_in] + cluster.endpoints) as c, cluster.client() as other:
            c._t.router.succeeded(stand_in)
            with c.elections.observe(name) as obs:
                assert obs.next(timeout=10).leader is None
                assert (obs.endpoint, obs.resumptions) == (real, 1)
                with other.session() as s:
                    with s.election(name).campaign(b"here") as lead:
                        change = obs.next(timeout=10)
                        assert change.leader.value == b"here" and change.leader.token == lead.token
                assert obs.next(timeout=10).leader is None
                assert (obs.endpoint, obs.resumptions) == (real, 1)
    finally:
        server.stop(None)
