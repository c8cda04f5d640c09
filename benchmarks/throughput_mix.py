"""Throughput of a real server under varied counts: 16 analysts sending random boxes.

    .venv/bin/python benchmarks/throughput_mix.py [--rows 100000] [--clients 16] [--seconds 20]

A ``dpcurator serve`` subprocess on 127.0.0.1 (the same server, data shape and limits
as ``benchmarks/service.py``: budget 10^9, the rate limit lifted), ``--clients``
threads, each with its own Client and analyst token, each sending counts one after
another for ``--seconds``: first the repeated mix of ``service.py`` (8 queries, so the
filter sees the same few boxes), then varied counts (a random ``age`` and ``week`` box
each, so every charge is new to the filter), alternating in slices so both see the
same machine. Printed: answered counts per second, p50 and p95 latency, errors, and the
server's peak resident memory. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import service  # the server helpers of benchmarks/service.py

from dpcurator.client import Client


def _box(rng: random.Random) -> str:
    a0, w0 = rng.randrange(100), rng.randrange(1, 53)
    a1, w1 = rng.randrange(a0, 100), rng.randrange(w0, 53)
    return f"age BETWEEN {a0} AND {a1} AND week BETWEEN {w0} AND {w1}"


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--slices", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        data = service.make_data(tmp, args.rows)
        schema = tmp / "schema.json"
        schema.write_text(service.json.dumps(service.SCHEMA))
        server, ledger = service.start_bench_server(tmp, data, schema, "mix")
        try:
            url = server.wait_ready()
            tokens = service.add_analysts(url, ledger, args.clients)
            clients = [Client(url, token) for token in tokens]
            rngs = [random.Random(i) for i in range(args.clients)]
            repeated = [lambda q, c=c: c.count(q, epsilon=service.COST) for c in clients]
            varied = [
                lambda _, c=c, r=r: c.count(_box(r), epsilon=service.COST)
                for c, r in zip(clients, rngs, strict=True)
            ]
            got: dict[str, list[tuple[int, list[float], int, float]]] = {"repeated": [], "varied": []}
            for _ in range(args.slices):
                for name, workers in (("repeated", repeated), ("varied", varied)):
                    got[name].append(service.concurrent(workers, args.seconds / args.slices))
            rss = _peak_rss_mb(server.proc.pid)
            for c in clients:
                c.close()
        finally:
            server.stop()
    print(f"\n{args.rows:,} rows, {args.clients} clients, {args.seconds:g} s of each mix")
    print(f"{'mix':10} {'counts/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'errors':>7}")
    rates = {}
    for name, runs in got.items():
        done = sum(r[0] for r in runs)
        secs = sum(r[3] for r in runs)
        lat = sorted(x for r in runs for x in r[1])
        rates[name] = done / secs
        p95 = lat[int(0.95 * (len(lat) - 1))] * 1000
        print(
            f"{name:10} {rates[name]:9.1f} {statistics.median(lat) * 1000:8.1f} {p95:8.1f} "
            f"{sum(r[2] for r in runs):7d}"
        )
    print(f"varied / repeated: {rates['varied'] / rates['repeated']:.2f}x; server peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()
