"""A TLS cluster with authorization on (`tenure cluster up --auth`)."""

from __future__ import annotations

import uuid

import pytest

import tenure


def test_tls_and_tokens(secure, monkeypatch):
    ns = "/s" + uuid.uuid4().hex[:8]
    assert secure.ca and secure.admin_token
    monkeypatch.delenv("TENURE_TOKEN", raising=False)
    monkeypatch.delenv("TENURE_CA", raising=False)
    # The CA as a path and the admin token: everything works.
    with tenure.Client(secure.endpoints, tls_ca=secure.ca, token=secure.admin_token) as c:
        assert c.status().stores == 8
        with c.session() as s, s.lock(f"{ns}/lock") as lock:
            c.objects.put(f"{ns}/obj", b"secret", fence=lock)
            assert c.objects.get(f"{ns}/obj").value == b"secret"
    # The CA as bytes, the token from the environment; and the local-cluster shortcut.
    monkeypatch.setenv("TENURE_TOKEN", secure.admin_token)
    with open(secure.ca, "rb") as f:
        pem = f.read()
    with tenure.Client(secure.endpoints, tls_ca=pem) as c:
        assert c.objects.get(f"{ns}/obj").value == b"secret"
    monkeypatch.delenv("TENURE_TOKEN")
    with tenure.Client.from_cluster(secure.data) as c:
        assert c.resolve(f"{ns}/obj").store == c.store_of(f"{ns}/obj")
    # No token, or an unknown one: UNAUTHENTICATED, not retried, readable.
    with tenure.Client(secure.endpoints, tls_ca=secure.ca) as c:
        with pytest.raises(tenure.Unauthenticated) as info:
            c.objects.get(f"{ns}/obj")
        assert "token" in str(info.value)
    with tenure.Client(secure.endpoints, tls_ca=secure.ca, token="tnr_not_a_token") as c:
        with pytest.raises(tenure.Unauthenticated) as info:
            c.resolve(f"{ns}/obj")
        assert "unknown token" in str(info.value)
    # A plaintext client cannot talk to a TLS cluster: it gives up within its deadline
    # and says TLS may be missing.
    with tenure.Client(secure.endpoints, token=secure.admin_token, deadline=2) as c:
        with pytest.raises((tenure.ConnectionFailed, tenure.DeadlineExceeded)) as info:
            c.resolve(f"{ns}/obj")
        assert "TLS" in str(info.value) or "tls" in str(info.value)
