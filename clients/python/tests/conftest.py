"""Fixtures: a real local Tenure cluster (3 devices on 127.0.0.1, in a temp dir) started
with the binary in ``TENURE_BIN`` (default: the repository's target/release/tenure),
plaintext for most tests.
The cluster is stopped at the end, and every device pid it ever had is killed (-9) in a
finalizer so that nothing leaks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

import tenure

DEFAULT_BIN = str(Path(__file__).resolve().parents[3] / "target" / "release" / "tenure")
UP_TIMEOUT = 90  # seconds: `cluster up --wait-secs 60` plus slack
SETTLE_TIMEOUT = 20  # seconds: managers migrating back to a restarted device


def tenure_bin() -> str:
    return os.environ.get("TENURE_BIN", DEFAULT_BIN)


class Cluster:
    """A running local cluster and how to reach, restart and stop it."""

    def __init__(self, bin_path: str, data: Path, *, tls: bool, auth: bool) -> None:
        self.bin = bin_path
        self.data = data
        self.tls = tls
        self.auth = auth
        self.pids: Set[int] = set()
        self.info: Dict = {}

    def _run(self, *args: str, timeout: float = UP_TIMEOUT) -> Dict:
        r = subprocess.run([self.bin, "cluster", *args, "--data", str(self.data), "--json"],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"tenure cluster {args[0]} failed ({r.returncode}): "
                               f"{r.stderr.strip() or r.stdout.strip()}")
        self.read_pids()
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def up(self) -> None:
        args = ["up", "--wait-secs", "60"]
        if not self.data.exists() or not (self.data / "cluster.json").exists():
            args += ["--devices", "3", "--stores", "8"]
            if not self.tls:
                args.append("--insecure")
            if self.auth:
                args.append("--auth")
        self.info = self._run(*args)

    def settled(self) -> bool:
        """Whether every device is up and the stores' managers are spread evenly (each
        store has one manager; the devices manage as many stores, give or take one)."""
        try:
            st = self._run("status", timeout=10)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError):
            return False
        devices = [d for d in st.get("devices", []) if d.get("member", "active") == "active"]
        counts = [d.get("managing", 0) for d in devices]
        return (bool(devices) and all(d.get("up") for d in devices)
                and max(counts) - min(counts) <= 1
                and all(len(x.get("managers", [])) == 1
                        and x["managers"][0].get("state") == "Manager"
                        for x in st.get("stores", [])))

    def restore(self, timeout: float = SETTLE_TIMEOUT) -> None:
        """Start the devices that are down (after a kill) and wait until the cluster has
        settled: a restarted device gets its share of the stores back by migrations a few
        seconds after `cluster up` returns, and a test that followed at once would see
        managers move (Unavailable for a moment) under it."""
        self.up()
        end = time.monotonic() + timeout
        while not self.settled():
            if time.monotonic() > end:
                print(f"the cluster did not settle within {timeout} s")
                return
            time.sleep(0.2)

    def down(self) -> None:
        try:
            self._run("down", timeout=30)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"tenure cluster down: {e}")

    def read_pids(self) -> List[Dict]:
        try:
            devices = json.loads((self.data / "cluster.json").read_text()).get("devices", [])
        except (OSError, ValueError):
            return []
        for d in devices:
            if d.get("pid"):
                self.pids.add(int(d["pid"]))
        return devices

    def devices(self) -> List[Dict]:
        return self.read_pids()

    @property
    def endpoints(self) -> List[str]:
        return [d["client_addr"] for d in self.devices()]

    def device_at(self, endpoint: str) -> Dict:
        for d in self.devices():
            if d["client_addr"] == endpoint:
                return d
        raise KeyError(endpoint)

    def kill_all(self) -> None:
        self.read_pids()
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    @property
    def ca(self) -> Optional[str]:
        ca = self.info.get("ca")
        if ca:
            return ca
        p = self.data / "tls" / "ca.pem"
        return str(p) if p.exists() else None

    @property
    def admin_token(self) -> Optional[str]:
        p = self.data / "admin.token"
        return p.read_text().strip() if p.exists() else None

    def client(self, **kw) -> tenure.Client:
        return tenure.Client(self.endpoints, **kw)


def start_cluster(request, tmp_path_factory, *, tls: bool, auth: bool, name: str) -> Cluster:
    path = tenure_bin()
    if not os.path.exists(path):
        pytest.fail(f"no tenure binary at {path} (build it, or set TENURE_BIN to a built `tenure`)")
    c = Cluster(path, tmp_path_factory.mktemp(name) / "data", tls=tls, auth=auth)

    def stop() -> None:
        c.down()
        c.kill_all()

    request.addfinalizer(stop)
    c.up()
    return c


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory) -> Cluster:
    """A plaintext 3-device cluster for the whole run."""
    return start_cluster(request, tmp_path_factory, tls=False, auth=False, name="plain")


@pytest.fixture(scope="session")
def secure(request, tmp_path_factory) -> Cluster:
    """A TLS cluster with authorization on (started only by the tests that ask)."""
    return start_cluster(request, tmp_path_factory, tls=True, auth=True, name="secure")


@pytest.fixture
def client(cluster):
    with cluster.client(deadline=30) as c:
        yield c


@pytest.fixture
def ns() -> str:
    """A unique first path segment per test (its names are in one store, and tests do
    not see each other's locks and objects)."""
    return "/t" + uuid.uuid4().hex[:10]
