#!/usr/bin/env python3
"""The table of a run.sh benchmark: medians over rounds per shape, clients and system,
and Tenure's ratio to the best peer on each measure.

    python report.py results.jsonl     # the table
    python report.py --line < one.json # one run's result on one line (run.sh's progress)

Standard library only; any Python 3.8+.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

SYSTEM_ORDER = ["tenure", "etcd", "zookeeper"]
SHAPE_ORDER = ["lock", "put", "get"]
SHORT = {"tenure": "tenure", "etcd": "etcd", "zookeeper": "zk"}

# (key, header, format, higher is better)
MEASURES = [
    ("ops_per_s", "ops/s", "{:.0f}", True),
    ("p50_ms", "p50 ms", "{:.2f}", False),
    ("p99_ms", "p99 ms", "{:.2f}", False),
    ("server_cpu_us_per_op", "srv CPU us/op", "{:.0f}", False),
    ("client_cpu_us_per_op", "cli CPU us/op", "{:.0f}", False),
]


def fmt(x: Optional[float], f: str) -> str:
    return "-" if x is None else f.format(x)


def line(r: dict) -> str:
    return (f"round {r.get('round') or '-'} {r['shape']:<4} c={r['clients']:<3} "
            f"{r['system']:<9} {r['ops_per_s']:8.0f} ops/s  p50 {fmt(r['p50_ms'], '{:.2f}')} ms"
            f"  p99 {fmt(r['p99_ms'], '{:.2f}')} ms"
            f"  server {fmt(r['server_cpu_us_per_op'], '{:.0f}')} us/op"
            f"  client {fmt(r['client_cpu_us_per_op'], '{:.0f}')} us/op"
            f"  errors {r['errors']}" + (f" ({r['first_error']})" if r.get("first_error") else ""))


def median(xs: List[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(rows: List[dict]) -> str:
    cells: Dict[Tuple[str, int], Dict[str, List[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        cells[(r["shape"], r["clients"])][r["system"]].append(r)

    def shape_key(k: Tuple[str, int]) -> Tuple[int, int]:
        s, c = k
        return (SHAPE_ORDER.index(s) if s in SHAPE_ORDER else 99, c)

    head = f"{'shape':<6}{'clients':>7}  {'system':<20}{'runs':>5}" + "".join(
        f"{h:>15}" for _, h, _, _ in MEASURES) + f"{'errors':>8}"
    out = [head, "-" * len(head)]
    for key in sorted(cells, key=shape_key):
        shape, clients = key
        by_sys = cells[key]
        systems = sorted(by_sys, key=lambda s: SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99)
        med: Dict[str, Dict[str, Optional[float]]] = {}
        for s in systems:
            runs = by_sys[s]
            med[s] = {m: median([r.get(m) for r in runs]) for m, _, _, _ in MEASURES}
            errors = sum(r.get("errors", 0) for r in runs)
            out.append(f"{shape:<6}{clients:>7}  {s:<20}{len(runs):>5}" + "".join(
                f"{fmt(med[s][m], f):>15}" for m, _, f, _ in MEASURES) + f"{errors:>8}")
        peers = [s for s in systems if s != "tenure"]
        if "tenure" in med and peers:
            cols = []
            for m, _, _, higher in MEASURES:
                vals = [(med[p][m], p) for p in peers if med[p][m] is not None]
                t = med["tenure"][m]
                if not vals or t is None:
                    cols.append(f"{'-':>15}")
                    continue
                best, who = (max if higher else min)(vals)
                ratio = f"{t / best:.2f}x" if best else "-"
                cols.append(f"{ratio + ' (' + SHORT.get(who, who) + ')':>15}")
            out.append(f"{shape:<6}{clients:>7}  {'tenure / best peer':<20}{'':>5}" + "".join(cols))
        out.append("")
    out.append("Medians over rounds. Ratio: Tenure's median / the best peer's median (named);")
    out.append("ops/s: above 1 is Tenure ahead; latency and CPU: below 1 is Tenure ahead.")
    out.append("srv CPU: utime+stime of the 3 server processes over the window / ops;")
    out.append("cli CPU: the benchmark (client) process over the window / ops.")
    return "\n".join(out)


def main(argv: List[str]) -> int:
    if argv[1:2] == ["--line"]:
        for raw in sys.stdin:
            if raw.strip():
                print(line(json.loads(raw)))
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    if not rows:
        print("no results", file=sys.stderr)
        return 1
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
