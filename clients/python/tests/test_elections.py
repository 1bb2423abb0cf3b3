"""Elections against a real cluster."""

from __future__ import annotations

import pytest

import tenure


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
