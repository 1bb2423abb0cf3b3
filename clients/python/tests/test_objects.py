"""The object store against a real cluster."""

from __future__ import annotations

import time

import pytest

import tenure


def test_put_get_and_compare_and_set(client, ns):
    key = f"{ns}/cfg/a"
    w1 = client.objects.put(key, b"1")
    obj = client.objects.get(key)
    assert obj.value == b"1" and obj.revision == w1.revision and obj.size == 1
    w2 = client.objects.put(key, "2", if_revision=obj.revision)  # str is UTF-8
    assert w2.revision > w1.revision
    with pytest.raises(tenure.RevisionMismatch) as info:
        client.objects.put(key, b"3", if_revision=obj.revision)
    assert info.value.current == w2.revision and info.value.key == key
    assert "revision" in str(info.value)
    assert client.objects.get(key).value == b"2"
    # Create only.
    with pytest.raises(tenure.ObjectExists) as info:
        client.objects.put(key, b"4", if_absent=True)
    assert info.value.revision == w2.revision
    fresh = client.objects.put(f"{ns}/cfg/new", b"n", if_absent=True)
    # if_revision=0: "no object yet".
    with pytest.raises(tenure.RevisionMismatch):
        client.objects.put(f"{ns}/cfg/new", b"m", if_revision=0)
    assert client.objects.head(f"{ns}/cfg/new").revision == fresh.revision


def test_list_and_delete(client, ns):
    keys = [f"{ns}/l/a", f"{ns}/l/b", f"{ns}/l/c/d"]
    for k in keys:
        client.objects.put(k, k.encode())
    listing = client.objects.list(f"{ns}/l")
    assert listing.keys() == keys
    assert listing.revision >= max(o.revision for o in listing)
    d = client.objects.delete(f"{ns}/l/b")
    assert d.revision > listing.revision
    assert client.objects.list(f"{ns}/l").keys() == [f"{ns}/l/a", f"{ns}/l/c/d"]
    with pytest.raises(tenure.NoSuchObject):
        client.objects.get(f"{ns}/l/b")
    with pytest.raises(tenure.NoSuchObject):
        client.objects.delete(f"{ns}/l/b")
    # A conditional delete.
    a = client.objects.head(f"{ns}/l/a")
    with pytest.raises(tenure.RevisionMismatch):
        client.objects.delete(f"{ns}/l/a", if_revision=a.revision + 100)
    client.objects.delete(f"{ns}/l/a", if_revision=a.revision)
    # Listing a whole store.
    store = client.store_of(f"{ns}/l")
    whole = client.objects.list("/", store=store)
    assert f"{ns}/l/c/d" in whole.keys()


def test_a_large_object_is_streamed(client, ns):
    key = f"{ns}/big"
    data = bytes(range(256)) * (12 * 1024)  # 3 MiB: three blocks, above one message
    w = client.objects.put(key, data)
    obj = client.objects.get(key)
    assert obj.value == data and obj.revision == w.revision and obj.size == len(data)


def test_an_ephemeral_object_goes_with_its_session(client, ns):
    key = f"{ns}/alive"
    with pytest.raises(ValueError):
        client.objects.put(key, b"x", ephemeral=True)
    with client.session() as s:
        client.objects.put(key, b"here", ephemeral=True, session=s)
        info = client.objects.head(key)
        # Owned by the session in the key's store: itself in its home store, else its
        # child there (which also holds the session's locks of that store).
        guard = s.lock(f"{ns}/guard")
        [holder] = client.holders(guard.name).holders
        assert info.owner_session == holder.session is not None
        if client.store_of(key) == s.store:
            assert info.owner_session == s.id
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.objects.head(key)
        except tenure.NoSuchObject:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the ephemeral object outlived its session")


def test_watch_with_values(client, ns):
    prefix = f"{ns}/w"
    with client.objects.watch(prefix, include_values=True) as watch:
        w1 = client.objects.put(f"{prefix}/a", b"one")
        w2 = client.objects.put(f"{prefix}/b", b"two")
        d = client.objects.delete(f"{prefix}/a")
        changes = [watch.next(timeout=10) for _ in range(3)]
        assert [(c.key, c.revision, c.deleted) for c in changes] == [
            (f"{prefix}/a", w1.revision, False), (f"{prefix}/b", w2.revision, False),
            (f"{prefix}/a", d.revision, True)]
        assert changes[0].value == b"one" and changes[1].value == b"two"
        assert changes[2].value is None
        assert watch.revision == d.revision
    # Resume from a revision: the changes after it again.
    with client.objects.watch(prefix, after=w1.revision) as again:
        c = again.next(timeout=10)
        assert (c.key, c.revision) == (f"{prefix}/b", w2.revision)


def test_watch_values_up_to_64_kib_and_errors(client, ns):
    prefix = f"{ns}/v"
    with client.objects.watch(prefix, include_values=True) as watch:
        sizes = [64 << 10, (64 << 10) + 1]
        written = [client.objects.put(f"{prefix}/{n}", bytes([n % 251]) * n) for n in sizes]
        small, large = (watch.next(timeout=10) for _ in sizes)
        assert (small.revision, small.size) == (written[0].revision, sizes[0])
        assert small.value == bytes([sizes[0] % 251]) * sizes[0]
        # Above 64 KiB the change comes without its content: get the key.
        assert (large.revision, large.size, large.value) == (written[1].revision, sizes[1], None)
    # A watch that cannot start raises at once (no retries).
    with pytest.raises(tenure.InvalidName) as info:
        client.objects.watch("no-slash")
    assert "no-slash" in str(info.value)
    with pytest.raises(tenure.InvalidName):
        client.objects.watch("/")  # every store: give store=
