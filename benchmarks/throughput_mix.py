"""Throughput of a real server under varied counts: 16 analysts sending random boxes.

    .venv/bin/python benchmarks/throughput_mix.py [--rows 100000] [--clients 16]
        [--seconds 20] [--slices 4] [--before TREE] [--workers N [N ...]]

A ``dpcurator serve`` subprocess on 127.0.0.1 (the same server, data shape and limits
as ``benchmarks/service.py``: budget 10^9, the rate limit lifted), ``--clients``
threads, each with its own Client and analyst token, each sending counts one after
another for ``--seconds``: first the repeated mix of ``service.py`` (8 queries, so the
filter sees the same few boxes), then varied counts (a random ``age`` and ``week`` box
each, so every charge is new to the filter), alternating in slices so both see the
same machine. Then the engine alone: ``--clients`` threads on one in-process
``Curator`` over the same data (a durable SQLite ledger), varied counts, in a
subprocess per tree.

``--before TREE``: another source tree (a checkout or ``git worktree``), measured in
the same run: its server runs beside this one's (idle while the other is measured) and
every slice alternates between the trees, because this kind of machine's speed drifts
by tens of percent within minutes.

``--workers 1 2``: the server measured with each number of worker processes
(``[server] workers``), side by side in the same run (every slice alternates between
them); the server's peak memory is then the sum of the supervisor's and its workers'.

Printed: answered counts per second, p50 and p95 latency, errors, the server's peak
resident memory, and (with ``--before``) the ratios. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import service  # the server helpers of benchmarks/service.py

from dpcurator.client import Client

ROOT = Path(__file__).resolve().parent.parent
#: One slice of a measurement: (answers, their latencies in seconds, errors, seconds).
Run = tuple[int, list[float], int, float]


def _box(rng: random.Random) -> str:
    a0, w0 = rng.randrange(100), rng.randrange(1, 53)
    a1, w1 = rng.randrange(a0, 100), rng.randrange(w0, 53)
    return f"age BETWEEN {a0} AND {a1} AND week BETWEEN {w0} AND {w1}"


def _peak_rss_mb(pid: int) -> float:
    """The peak resident memory of ``pid`` and, for a server with workers, of each of
    its workers (their solver processes left out), summed."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    workers = [int(c) for c in children if b"dpcurator.cli" in _cmdline(int(c))]
    total = 0.0
    for p in (pid, *workers):
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
    return total


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _env(tree: Path) -> dict[str, str]:
    """The environment in which ``tree``'s code runs (its ``src`` first on the path)."""
    return dict(os.environ, PYTHONPATH=str(tree / "src"))


def engine(data: Path, schema: Path, ledger: Path, clients: int, seconds: float) -> Run:
    """``clients`` threads of varied counts on one in-process Curator (no HTTP)."""
    from dpcurator import Curator
    from dpcurator.privacy import PureDP

    cur = Curator.open(data, schema, budget=PureDP(service.BIG), ledger=ledger)
    try:
        sessions = [cur.analyst(f"engine{i}") for i in range(clients)]
        rngs = [random.Random(i) for i in range(clients)]
        workers = [
            lambda _, s=s, r=r: s.count(_box(r), epsilon=service.COST)
            for s, r in zip(sessions, rngs, strict=True)
        ]
        service.concurrent(workers, min(2.0, seconds))  # warm: the first charges
        return service.concurrent(workers, seconds)
    finally:
        cur.close()


def _engine_slice(
    tree: Path, tmp: Path, data: Path, schema: Path, args: argparse.Namespace, n: int
) -> Run:
    """One slice of :func:`engine` in a subprocess running ``tree``'s code."""
    ledger = tmp / f"engine-{n}.db"
    out = subprocess.run(
        [sys.executable, __file__, "--engine", str(data), str(schema), str(ledger),
         str(args.clients), str(args.seconds / args.slices)],
        env=_env(tree), capture_output=True, text=True, check=True,
    )  # fmt: skip
    done, lat, errors, secs = json.loads(out.stdout.strip().splitlines()[-1])
    return done, lat, errors, secs


def _row(name: str, runs: list[Run]) -> tuple[str, float]:
    done = sum(r[0] for r in runs)
    secs = sum(r[3] for r in runs)
    lat = sorted(x for r in runs for x in r[1])
    rate = done / secs
    p95 = lat[int(0.95 * (len(lat) - 1))] * 1000
    errors = sum(r[2] for r in runs)
    line = f"{name:38} {rate:9.1f} {statistics.median(lat) * 1000:8.1f} {p95:8.1f} {errors:7d}"
    return line, rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--slices", type=int, default=4)
    ap.add_argument("--before", type=Path, help="another source tree, measured in the same run")
    ap.add_argument(
        "--workers", type=int, nargs="+", default=[1], metavar="N",
        help="measure the server with each of these numbers of worker processes",
    )  # fmt: skip
    args = ap.parse_args()
    trees = [("after" if args.before else "this tree", ROOT)]
    if args.before:
        trees.append(("before", args.before.resolve()))
    shown_workers = args.workers != [1]
    servers_of = [
        (f"{label}, {n} worker{'s' * (n > 1)}" if shown_workers else label, tree, n)
        for label, tree in trees
        for n in args.workers
    ]
    got: dict[tuple[str, str], list[Run]] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        data = service.make_data(tmp, args.rows)
        schema = tmp / "schema.json"
        schema.write_text(service.json.dumps(service.SCHEMA))
        servers = []
        try:
            mixes = {}
            for label, tree, n in servers_of:
                server, ledger = service.start_bench_server(
                    tmp, data, schema, f"mix-{len(servers)}", env=_env(tree), workers=n
                )
                servers.append(server)
                url = server.wait_ready()
                tokens = service.add_analysts(url, ledger, args.clients, env=_env(tree))
                clients = [Client(url, token) for token in tokens]
                rngs = [random.Random(i) for i in range(args.clients)]
                mixes[label] = {
                    "repeated": [lambda q, c=c: c.count(q, epsilon=service.COST) for c in clients],
                    "varied": [
                        lambda _, c=c, r=r: c.count(_box(r), epsilon=service.COST)
                        for c, r in zip(clients, rngs, strict=True)
                    ],
                }
            for _ in range(args.slices):
                for label, _tree, _n in servers_of:
                    for name, workers in mixes[label].items():
                        run = service.concurrent(workers, args.seconds / args.slices)
                        got.setdefault((label, name), []).append(run)
            for (label, _tree, _n), server in zip(servers_of, servers, strict=True):
                rss[label] = _peak_rss_mb(server.proc.pid)
        finally:
            for server in servers:
                server.stop()
        for n in range(args.slices):  # each slice on a new ledger, alternating the trees
            for k, (label, tree) in enumerate(trees):
                run = _engine_slice(tree, tmp, data, schema, args, n * len(trees) + k)
                got.setdefault((label, "engine"), []).append(run)
    print(f"\n{args.rows:,} rows, {args.clients} clients, {args.seconds:g} s of each mix, "
          f"{args.slices} alternating slices")  # fmt: skip
    print(f"{'tree: mix':38} {'counts/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'errors':>7}")
    rates: dict[tuple[str, str], float] = {}
    for label, _tree in trees:
        line, rates[label, "engine"] = _row(f"{label}: varied, in process", got[label, "engine"])
        print(line)
    for label, tree, _n in servers_of:
        for name in ("repeated", "varied"):
            line, rates[label, name] = _row(f"{label}: {name}, HTTP", got[label, name])
            print(line)
        engine = next(t for t in trees if t[1] == tree)[0]
        print(
            f"{label}: varied / repeated {rates[label, 'varied'] / rates[label, 'repeated']:.2f}x"
            f", HTTP / in process {rates[label, 'varied'] / rates[engine, 'engine']:.2f}x; "
            f"server peak RSS {rss[label]:.0f} MB"
        )
    if args.before:
        print(
            "after / before, in process: "
            f"{rates['after', 'engine'] / rates['before', 'engine']:.2f}x"
        )
        for n in args.workers:
            a, b = (
                next(s[0] for s in servers_of if s[0].startswith(t) and s[2] == n)
                for t in ("after", "before")
            )
            print(f"after / before, {n} worker{'s' * (n > 1)}: " + ", ".join(
                f"{name} {rates[a, name] / rates[b, name]:.2f}x" for name in ("repeated", "varied")
            ))  # fmt: skip
    if len(args.workers) > 1:
        for label, _tree in trees:
            one = next(s[0] for s in servers_of if s[0].startswith(label))
            for other, _t, n in servers_of:
                if other.startswith(label) and other != one:
                    print(f"{label}: {n} workers / {args.workers[0]}: varied "
                          f"{rates[other, 'varied'] / rates[one, 'varied']:.2f}x, repeated "
                          f"{rates[other, 'repeated'] / rates[one, 'repeated']:.2f}x")  # fmt: skip


def _engine_main(argv: list[str]) -> None:
    data, schema, ledger, clients, seconds = argv
    done, lat, errors, secs = engine(Path(data), Path(schema), Path(ledger), int(clients),
                                     float(seconds))  # fmt: skip
    print(json.dumps([done, lat, errors, secs]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--engine":
        _engine_main(sys.argv[2:])
    else:
        main()
