#!/usr/bin/env python3
"""One load run against Tenure, etcd or ZooKeeper with the system's usual Python client.

    python peers.py --system tenure|etcd|zookeeper --endpoints H:P,H:P,H:P \\
        --shape lock|put|get --clients N --names M --seconds S [--pids P,P,P] --json

Run it with the virtualenv that has the client: Tenure's package (``tenure``) in one,
``etcd3`` (python-etcd3, which needs protobuf < 3.21) and ``kazoo`` in another. Only the
client module of the system asked for is imported.

Shapes (every client is a thread of this process, with its own client object and, for
locks, its own session; the GIL is the same for every system):

* ``lock``: acquire-then-release cycles of an exclusive lock. Client thread ``t`` uses
  names ``t, t+N, t+2N, ...`` below M in turn when ``M >= N`` (no two threads ever want
  the same lock: the uncontended cost), or name ``t % M`` when ``M < N`` (threads queue
  for the same locks). Tenure: ``session.lock(name)`` (one session per thread);
  etcd: python-etcd3's ``client.lock(name, ttl)`` recipe (a lease per acquire, a
  put-if-absent transaction, a watch when taken, a compare-and-delete release);
  ZooKeeper: kazoo's ``client.Lock(path)`` recipe (one ZooKeeper session per thread: an
  ephemeral sequential node, the children listed, the predecessor watched when taken).
* ``put``: 256-byte values (``--value-size``) to distinct keys, never the same key twice.
  Tenure ``objects.put``; etcd ``put``; ZooKeeper ``create``.
* ``get``: reads of M keys written (256-byte values) before the timed phase, each
  thread reading them in a random order. Tenure ``objects.get`` (linearizable); etcd
  ``get`` (linearizable, python-etcd3's default); ZooKeeper ``get`` (served by the
  server the session is connected to: sequentially consistent, not linearizable).

Timing: every thread runs from the start; operations completing in the first
``--warmup`` seconds (2) are not counted; then ``--seconds`` are measured: ops/s, latency
percentiles of the operations that completed in the window, and the CPU time (utime +
stime in /proc/<pid>/stat) that the server processes given with ``--pids`` used during
the window, per operation. The CPU of this (client) process over the window is reported
too, per operation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional, Sequence, Tuple

CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- server CPU ------------------------------------------------------------------------

def proc_cpu(pid: int) -> Optional[float]:
    """utime + stime of a process (all its threads), in seconds; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = raw[raw.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_of(pids: Sequence[int]) -> Dict[int, Optional[float]]:
    return {p: proc_cpu(p) for p in pids}


def cpu_delta(before: Dict[int, Optional[float]], after: Dict[int, Optional[float]]) -> Tuple[float, List[int]]:
    total, gone = 0.0, []
    for p, b in before.items():
        a = after.get(p)
        if a is None or b is None:
            gone.append(p)
            continue
        total += a - b
    return total, gone


# -- the systems -----------------------------------------------------------------------
#
# Each adapter: connect(thread index) -> a per-thread handle; the operations on it; and
# close(handle). Setup (connections, sessions, parent paths) is outside the timed phase.

class Tenure:
    name = "tenure"

    def __init__(self, endpoints: List[str], args: argparse.Namespace) -> None:
        import tenure
        self.tenure = tenure
        self.endpoints = endpoints
        self.ttl = args.ttl

    def connect(self, t: int) -> dict:
        c = self.tenure.Client(self.endpoints)
        return {"c": c, "s": None}

    def session(self, h: dict) -> None:
        h["s"] = h["c"].session(ttl=self.ttl)

    def lock_cycle(self, h: dict, name: str) -> None:
        with h["s"].lock(name):
            pass

    def put(self, h: dict, key: str, value: bytes) -> None:
        h["c"].objects.put(key, value)

    def get(self, h: dict, key: str) -> bytes:
        return h["c"].objects.get(key).value

    def ensure_parents(self, h: dict, parents: List[str]) -> None:
        pass

    def close(self, h: dict) -> None:
        if h["s"] is not None:
            h["s"].close()
        h["c"].close()


def etcd3_tenacity_compat() -> None:
    """python-etcd3 0.12.0 (its latest release) hands tenacity an old-style ``wait``
    callback, ``wait(previous_attempt_number, delay_since_first_attempt)``, in
    ``Lock.acquire``. tenacity dropped those callbacks in 7.0 and calls ``wait(retry_state)``,
    so every acquire of a lock that is taken fails with ``TypeError: ... wait() missing 1
    required positional argument: 'delay_since_first_attempt'``. The uncontended path never
    waits, so only contended locks break. Adapt the callback the way tenacity 6's compat
    layer did (attempt_number, seconds_since_start); nothing else of the recipe changes.
    (Pinning ``tenacity<7`` in the peers' virtualenv works as well.)"""
    import inspect

    import etcd3.locks
    import tenacity

    if isinstance(getattr(etcd3.locks, "tenacity", None), _TenacityShim):
        return

    class Shim(_TenacityShim):
        def retry(self, *a, **kw):  # type: ignore[no-untyped-def]
            w = kw.get("wait")
            if callable(w) and not isinstance(w, tenacity.wait.wait_base):
                names = list(inspect.signature(w).parameters)
                if names[:2] == ["previous_attempt_number", "delay_since_first_attempt"]:
                    kw["wait"] = lambda rs, w=w: w(rs.attempt_number, rs.seconds_since_start)
            return tenacity.retry(*a, **kw)

    etcd3.locks.tenacity = Shim(tenacity)

    # python-etcd3's watch thread (started by a lock's first wait) does not stop at
    # client.close(): it calls Watch again on the closed channel and dies with
    # "ValueError: Cannot invoke RPC: Channel closed!". Keep that traceback out of the log.
    previous = threading.excepthook

    def hook(a: "threading.ExceptHookArgs") -> None:
        if (a.thread is not None and a.thread.name.startswith("etcd3_watch")
                and isinstance(a.exc_value, ValueError) and "Channel closed" in str(a.exc_value)):
            return
        previous(a)

    threading.excepthook = hook


class _TenacityShim:
    def __init__(self, real: object) -> None:
        self._real = real

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


class Etcd:
    name = "etcd"

    def __init__(self, endpoints: List[str], args: argparse.Namespace) -> None:
        import etcd3
        etcd3_tenacity_compat()
        self.etcd3 = etcd3
        self.endpoints = endpoints
        self.ttl = int(round(args.ttl))
        self.lock_timeout = args.lock_timeout

    def connect(self, t: int) -> dict:
        # python-etcd3 talks to one endpoint: the threads are spread over the members
        # (as a load balancer, or kazoo's random host choice, would).
        host, port = self.endpoints[t % len(self.endpoints)].rsplit(":", 1)
        c = self.etcd3.client(host=host, port=int(port), timeout=30)
        return {"c": c, "locks": {}}

    def session(self, h: dict) -> None:
        pass  # the recipe makes its own lease at each acquire

    def lock_cycle(self, h: dict, name: str) -> None:
        lk = h["locks"].get(name)
        if lk is None:
            lk = h["locks"][name] = h["c"].lock(name, ttl=self.ttl)
        # Not `with lk:` -- Lock.__enter__ ignores a failed acquire (it gives up after
        # 10 s and the body runs without the lock). A failed acquire is an error here.
        if not lk.acquire(timeout=self.lock_timeout):
            raise TimeoutError(f"etcd lock {name} not acquired within {self.lock_timeout} s")
        lk.release()

    def put(self, h: dict, key: str, value: bytes) -> None:
        h["c"].put(key, value)

    def get(self, h: dict, key: str) -> bytes:
        value, _meta = h["c"].get(key)
        if value is None:
            raise KeyError(key)
        return value

    def ensure_parents(self, h: dict, parents: List[str]) -> None:
        pass

    def close(self, h: dict) -> None:
        h["c"].close()


class ZooKeeper:
    name = "zookeeper"

    def __init__(self, endpoints: List[str], args: argparse.Namespace) -> None:
        import kazoo.client
        self.kazoo = kazoo.client
        self.hosts = ",".join(endpoints)
        self.ttl = args.ttl

    def connect(self, t: int) -> dict:
        # One KazooClient per thread: its own connection and ZooKeeper session (kazoo
        # picks one of the hosts at random).
        c = self.kazoo.KazooClient(hosts=self.hosts, timeout=self.ttl)
        c.start(timeout=30)
        return {"c": c, "locks": {}}

    def session(self, h: dict) -> None:
        pass  # the KazooClient is the session

    def lock_cycle(self, h: dict, name: str) -> None:
        lk = h["locks"].get(name)
        if lk is None:
            lk = h["locks"][name] = h["c"].Lock(name)
        with lk:
            pass

    def put(self, h: dict, key: str, value: bytes) -> None:
        h["c"].create(key, value)

    def get(self, h: dict, key: str) -> bytes:
        value, _stat = h["c"].get(key)
        return value

    def ensure_parents(self, h: dict, parents: List[str]) -> None:
        for p in parents:
            h["c"].ensure_path(p)

    def close(self, h: dict) -> None:
        try:
            h["c"].stop()
        finally:
            h["c"].close()


SYSTEMS = {"tenure": Tenure, "etcd": Etcd, "zookeeper": ZooKeeper}


# -- the run ---------------------------------------------------------------------------

def percentile(sorted_ms: List[float], q: float) -> Optional[float]:
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, max(0, int(round(q / 100.0 * len(sorted_ms) + 0.5)) - 1))
    return sorted_ms[i]


def run(args: argparse.Namespace) -> dict:
    endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    system = SYSTEMS[args.system](endpoints, args)
    n, m = args.clients, args.names
    run_id = args.run_id or uuid.uuid4().hex[:8]
    prefixes = [f"/bench-{run_id}-p{j}" for j in range(args.prefixes)]
    value = os.urandom(args.value_size)

    def lock_name(i: int) -> str:
        return f"{prefixes[i % len(prefixes)]}/lock/{i}"

    def get_key(i: int) -> str:
        return f"{prefixes[i % len(prefixes)]}/get/k{i}"

    def put_key(t: int, i: int) -> str:
        return f"{prefixes[(t + i) % len(prefixes)]}/put/t{t}-{i}"

    # connect every client (and open its session for the lock shape) before timing
    handles: List[dict] = [None] * n  # type: ignore[list-item]
    setup_errors: List[str] = []

    def setup(t: int) -> None:
        try:
            h = system.connect(t)
            if args.shape == "lock":
                system.session(h)
            handles[t] = h
        except Exception as e:  # noqa: BLE001 - reported
            setup_errors.append(f"client {t}: {type(e).__name__}: {e}")

    ts = [threading.Thread(target=setup, args=(t,)) for t in range(n)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    if setup_errors:
        raise SystemExit("setup failed: " + "; ".join(setup_errors[:3]))

    h0 = handles[0]
    parents = sorted({p + "/" + sub for p in prefixes for sub in ("put", "get", "lock")})
    system.ensure_parents(h0, parents)

    if args.shape == "get":
        # the keys read are written before the timed phase, by all the clients at once
        def preload(t: int) -> None:
            for i in range(t, m, n):
                system.put(handles[t], get_key(i), value)
        ts = [threading.Thread(target=preload, args=(t,)) for t in range(n)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        got = system.get(h0, get_key(m - 1))
        if got != value:
            raise SystemExit(f"preload check failed: read {len(got or b'')} bytes back")

    # per-thread (completion time, latency s) records; errors
    records: List[List[Tuple[float, float]]] = [[] for _ in range(n)]
    errors = [0] * n
    first_error: List[str] = []
    stop = threading.Event()
    start_gate = threading.Event()

    def worker(t: int) -> None:
        h = handles[t]
        rec = records[t]
        rnd = random.Random(t * 7919 + 17)
        if args.shape == "lock":
            mine = list(range(t, m, n)) if m >= n else [t % m]
            names = [lock_name(i) for i in mine]

            def op(k: int) -> None:
                system.lock_cycle(h, names[k % len(names)])
        elif args.shape == "put":
            def op(k: int) -> None:
                system.put(h, put_key(t, k), value)
        else:
            order = list(range(m))
            rnd.shuffle(order)
            keys = [get_key(i) for i in order]

            def op(k: int) -> None:
                system.get(h, keys[k % len(keys)])
        start_gate.wait()
        k = 0
        pc = time.perf_counter
        while not stop.is_set():
            t0 = pc()
            try:
                op(k)
            except Exception as e:  # noqa: BLE001 - counted, reported
                errors[t] += 1
                if not first_error:
                    first_error.append(f"{type(e).__name__}: {e}")
                time.sleep(0.01)
                k += 1
                continue
            t1 = pc()
            rec.append((t1, t1 - t0))
            k += 1

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(n)]
    for th in threads:
        th.start()
    pids = [int(p) for p in args.pids.split(",") if p.strip()] if args.pids else []
    other = [int(p) for p in args.other_pids.split(",") if p.strip()] if args.other_pids else []

    t_begin = time.perf_counter()
    start_gate.set()
    w0 = t_begin + args.warmup
    w1 = w0 + args.seconds
    time.sleep(max(0.0, w0 - time.perf_counter()))
    cpu0, ocpu0, me0 = cpu_of(pids), cpu_of(other), time.process_time()
    w0 = time.perf_counter()
    err0 = sum(errors)
    time.sleep(max(0.0, w1 - time.perf_counter()))
    cpu1, ocpu1, me1 = cpu_of(pids), cpu_of(other), time.process_time()
    w1 = time.perf_counter()
    err1 = sum(errors)
    stop.set()
    # A thread may still wait for a lock whose other contenders have stopped (python-etcd3's
    # recipe can miss the release it waits for and then sleeps until its timeout): closing
    # the clients ends such waits.
    deadline = time.monotonic() + 10.0
    for th in threads:
        th.join(timeout=max(0.0, deadline - time.monotonic()))
    closed = False
    if any(th.is_alive() for th in threads):
        for h in handles:
            try:
                system.close(h)
            except Exception:  # noqa: BLE001 - best effort
                pass
        closed = True
        deadline = time.monotonic() + 10.0
        for th in threads:
            th.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = sum(1 for th in threads if th.is_alive())

    lat = sorted(d * 1000.0 for rec in records for (end, d) in rec if w0 <= end < w1)
    window = w1 - w0
    ops = len(lat)
    server_cpu, gone = cpu_delta(cpu0, cpu1)
    other_cpu, _ = cpu_delta(ocpu0, ocpu1)
    client_cpu = me1 - me0

    if not closed:
        for h in handles:
            try:
                system.close(h)
            except Exception:  # noqa: BLE001 - best effort
                pass

    return {
        "system": args.system,
        "shape": args.shape,
        "clients": n,
        "names": m,
        "prefixes": args.prefixes,
        "value_size": args.value_size,
        "seconds": round(window, 3),
        "warmup": args.warmup,
        "ops": ops,
        "ops_per_s": ops / window if window > 0 else 0.0,
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": lat[-1] if lat else None,
        "errors": err1 - err0,
        "errors_total": sum(errors),
        "first_error": first_error[0] if first_error else None,
        "server_pids": pids,
        "server_pids_gone": gone,
        "server_cpu_s": round(server_cpu, 4),
        "server_cpu_us_per_op": server_cpu / ops * 1e6 if ops else None,
        "client_cpu_s": round(client_cpu, 4),
        "client_cpu_us_per_op": client_cpu / ops * 1e6 if ops else None,
        "other_servers_cpu_s": round(other_cpu, 4) if other else None,
        "stuck_threads": stuck,
        "run_id": run_id,
        "round": args.round,
        "python": sys.version.split()[0],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, choices=sorted(SYSTEMS))
    p.add_argument("--endpoints", required=True,
                   help="client endpoints host:port, comma-separated")
    p.add_argument("--shape", required=True, choices=["lock", "put", "get"])
    p.add_argument("--clients", type=int, default=1, help="client threads (N)")
    p.add_argument("--names", type=int, default=None,
                   help="lock names (lock; default N: uncontended) or keys read (get; "
                        "default 1000)")
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds not counted first")
    p.add_argument("--pids", default="", help="server pids, comma-separated (CPU per op)")
    p.add_argument("--other-pids", default="",
                   help="pids of servers not under test, whose CPU in the window is "
                        "reported (noise they add on a shared machine)")
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--prefixes", type=int, default=1,
                   help="spread names/keys over this many first path segments (Tenure "
                        "places a name's store by its first segment; 1: one store)")
    p.add_argument("--ttl", type=float, default=10.0,
                   help="session TTL / lock lease TTL / ZooKeeper session timeout (s)")
    p.add_argument("--lock-timeout", type=float, default=30.0,
                   help="etcd: give up an acquire after this long (counted as an error)")
    p.add_argument("--run-id", default="", help="key prefix tag (default random)")
    p.add_argument("--round", type=int, default=None, help="recorded in the result")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = p.parse_args(argv)
    if args.clients < 1:
        p.error("--clients must be >= 1")
    if args.names is None:
        args.names = args.clients if args.shape == "lock" else 1000
    if args.names < 1 or args.prefixes < 1:
        p.error("--names and --prefixes must be >= 1")

    res = run(args)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        def f(x: Optional[float], fmt: str = "{:.2f}") -> str:
            return "-" if x is None else fmt.format(x)
        print(f"{res['system']:<10} {res['shape']:<5} clients={res['clients']:<3} "
              f"ops/s={res['ops_per_s']:.0f} p50={f(res['p50_ms'])}ms "
              f"p99={f(res['p99_ms'])}ms server={f(res['server_cpu_us_per_op'], '{:.0f}')}us/op "
              f"client={f(res['client_cpu_us_per_op'], '{:.0f}')}us/op errors={res['errors']}"
              + (f" ({res['first_error']})" if res['first_error'] else ""))
    # stuck threads (a lock wait that never ends) must not keep the process alive
    sys.stdout.flush()
    if res["stuck_threads"]:
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
