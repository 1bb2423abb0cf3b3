"""The lookup service against a real cluster."""

from __future__ import annotations

import time

import pytest

import tenure


def test_publish_get_watch_and_revoke(client, ns):
    key = f"{ns}/svc/api/1"
    with client.lookup.watch(f"{ns}/svc") as watch:
        pub = client.lookup.publish(key, b"10.0.0.1:80", interval=0.3)
        entry = client.lookup.get(key)
        assert entry is not None and entry.value == b"10.0.0.1:80" and entry.interval == 0.3
        change = watch.next(timeout=10)
        assert (change.kind, change.key, change.entry.value) == ("put", key, b"10.0.0.1:80")
        # Kept alive in the background well past two intervals.
        time.sleep(1.2)
        assert client.lookup.get(key) is not None and pub.healthy and pub.refreshes >= 2
        assert [e.key for e in client.lookup.list(f"{ns}/svc")] == [key]
        pub.update(b"10.0.0.2:80")
        deadline = time.monotonic() + 10
        while client.lookup.get(key).value != b"10.0.0.2:80":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pub.revoke()
        assert client.lookup.get(key) is None
        kinds = []
        deadline = time.monotonic() + 10
        while "removed" not in kinds:
            kinds.append(watch.next(timeout=max(0.1, deadline - time.monotonic())).kind)
        assert kinds[-1] == "removed"


def test_lookup_errors(client, ns):
    with pytest.raises(tenure.BadInterval) as info:
        client.lookup.publish(f"{ns}/x", b"v", interval=100)
    assert info.value.max <= 60 and "interval" in str(info.value)
    with pytest.raises(tenure.InvalidKey):
        client.lookup.get("no-slash")


def test_an_entry_expires_once_no_longer_refreshed(cluster, ns):
    key = f"{ns}/svc/gone"
    c = cluster.client()
    c.lookup.publish(key, b"v", interval=0.2)
    # Closing the client revokes what it publishes.
    c.close()
    with cluster.client() as other:
        assert other.lookup.get(key) is None
