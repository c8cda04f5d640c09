"""Replicas benchmark: counts per second with 1, 2 and 4 ``dpcurator serve`` replicas on one
PostgreSQL ledger, against SQLite ledgers, 16 client processes, all in the same run.

    .venv/bin/python benchmarks/replicas.py [--seconds S] [--rounds R] [--postgres URL]

Every configuration serves the same 10^5 generated rows under PureDP(1e6) (every count
costs epsilon 0.001, so nothing is refused) to 16 client processes (plain httpx, one
analyst token each, client i talking to replica i mod R, as a proxy would spread them),
which send counts of overlapping queries one after the other for S seconds (default 5)
after a warm-up. Every configuration's servers are started first and stay up; then R
rounds (default 3) measure each configuration in turn, in an order that rotates from
round to round, so that the load of whatever else runs on the machine weighs on all of
them alike; a row adds up its rounds (and gives the slowest and fastest round).
Configurations:

- ``sqlite``: 1 server on an SQLite ledger file (the embedded default), then 2 and 4
  server processes on that one file (one host);
- ``postgresql``: 1, 2 and 4 replicas on one PostgreSQL ledger (fresh schema each),
  each with the rate limit shared in the database (the default) and per server.

The PostgreSQL server is a throw-away one started here from Debian's binaries with fsync
on (``tests/postgres_server.py``; as root it runs as user dpcpg or postgres), unless
``--postgres URL`` names one. Both ledgers commit durably: SQLite with
``synchronous=FULL``, PostgreSQL with ``synchronous_commit=on`` and fsync. Everything runs
on this machine (the CPU count is printed): replicas, clients and the database share its
cores, so what more replicas buy here is bounded by them; on several hosts each replica
brings its own. Nothing here asserts a time; the table is printed, with each figure's
ratio to one SQLite server. Every server is stopped and every temporary file removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from postgres_server import temporary  # noqa: E402

from dpcurator.curator.ledger import Ledger  # noqa: E402

ROWS = 100_000
CLIENTS = 16
WARMUP = 2.0
SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": [f"r{i}" for i in range(20)]},
        {"name": "week", "type": "integer", "min": 1, "max": 52},
    ]
}
QUERIES = [
    "age < 50",
    "age >= 30 AND week <= 26",
    "sex = 'F' AND region IN ('r1', 'r2', 'r3')",
    "region = 'r7' AND week > 40",
    "age > 85 AND sex = 'M'",
    "week BETWEEN 10 AND 20",
]
CONFIG = "[server]\nrequests_per_second = 100000\nburst = 100000\n"

CLIENT = r"""
import json, sys, time
import httpx
url, token, warmup, seconds, queries = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5])
c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
times, errors, i = [], {}, 0
while True:
    t = time.monotonic()
    if t - start > warmup + seconds:
        break
    r = c.post("/v1/count", json={"query": queries[i % len(queries)], "epsilon": 0.001})
    i += 1
    if r.status_code != 200:
        reason = f"{r.status_code} {r.json().get('error')}"
        errors[reason] = errors.get(reason, 0) + 1
    elif t - start >= warmup:
        times.append(time.monotonic() - t)
print(json.dumps({"latencies": times, "errors": errors}), flush=True)
"""


def write_data(directory: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(5)
    data = directory / "people.csv"
    age = rng.integers(0, 100, ROWS)
    sex = rng.choice(["F", "M"], ROWS)
    region = rng.integers(0, 20, ROWS)
    week = rng.integers(1, 53, ROWS)
    with open(data, "w") as f:
        f.write("age,sex,region,week\n")
        for a, s, r, w in zip(age, sex, region, week, strict=True):
            f.write(f"{a},{s},r{r},{w}\n")
    schema = directory / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


@contextlib.contextmanager
def servers(
    directory: Path, data: tuple[Path, Path], ledger: str, n: int, scope: str = "auto"
) -> Iterator[list[str]]:
    """``n`` serve processes on ``ledger`` (rate limit ``scope``): their URLs."""
    cfg = directory / "server.toml"
    cfg.write_text(CONFIG + f'rate_limit_scope = "{scope}"\n')
    procs: list[subprocess.Popen] = []
    try:
        urls = []
        for i in range(n):
            cmd = [sys.executable, "-m", "dpcurator.cli", "serve", "--port", "0"]
            cmd += ["--data", str(data[0]), "--schema", str(data[1]), "--epsilon", "1e6"]
            cmd += ["--ledger", ledger, "--config", str(cfg)]
            if ledger.startswith("postgresql://"):  # each replica its own anchor, as on hosts
                cmd += ["--anchor", str(directory / f"anchor-{i}")]
            log = open(directory / f"server-{i}.log", "w")  # noqa: SIM115 (the child keeps it)
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
            procs.append(p)
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(
                target=lambda p=p, q=lines: [q.put(x) for x in p.stdout], daemon=True
            ).start()
            deadline = time.monotonic() + 120
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    log.flush()
                    text = (directory / f"server-{i}.log").read_text()[-2000:]
                    raise RuntimeError(f"a server did not start: {text}") from None
                if line.startswith("listening on "):
                    urls.append(line.split()[-1])
                    break
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def measure(urls: list[str], tokens: list[str], seconds: float) -> dict:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLIENT,
                urls[i % len(urls)],
                tokens[i],
                str(WARMUP),
                str(seconds),
                json.dumps(QUERIES),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(CLIENTS)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.communicate(timeout=seconds + 120)[0]) for p in procs]
    lat = np.array([x for r in results for x in r["latencies"]])
    return {
        "rate": len(lat) / seconds,
        "latencies": lat,
        "errors": {
            k: sum(r["errors"].get(k, 0) for r in results)
            for k in sorted({k for r in results for k in r["errors"]})
        },
    }


def summary(runs: list[dict]) -> dict:
    """The rounds of one configuration together."""
    lat = np.concatenate([r["latencies"] for r in runs])
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "rate": sum(r["rate"] for r in runs) / len(runs),
        "low": min(r["rate"] for r in runs),
        "high": max(r["rate"] for r in runs),
        "p50": float(np.percentile(lat, 50)) * 1000 if len(lat) else float("nan"),
        "p95": float(np.percentile(lat, 95)) * 1000 if len(lat) else float("nan"),
        "errors": errors,
    }


#: (ledger, servers, rate-limit scope): on PostgreSQL the default scope shares each
#: analyst's bucket in the database (one statement per request); "server" keeps each
#: server's own, for the cost of sharing, in the same run.
CONFIGS = [("sqlite", 1, "auto"), ("sqlite", 2, "auto"), ("sqlite", 4, "auto")] + [
    ("postgresql", k, scope) for k in (1, 2, 4) for scope in ("auto", "server")
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the configurations")
    ap.add_argument("--postgres", metavar="URL", help="a PostgreSQL server to use")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpcurator-bench-replicas-"))
    cluster = None
    try:
        data = write_data(tmp)
        if args.postgres:
            server = args.postgres
        else:
            cluster = temporary(durable=True)
            server = cluster.url
        sep = "&" if "?" in server else "?"
        with contextlib.ExitStack() as stack:
            up = []
            for kind, n, scope in CONFIGS:
                d = tmp / f"{kind}-{n}-{scope}"
                d.mkdir()
                if kind == "sqlite":
                    ledger = str(d / "ledger.db")
                else:
                    ledger = f"{server}{sep}schema=bench_{secrets.token_hex(4)}"
                urls = stack.enter_context(servers(d, data, ledger, n, scope))
                led = Ledger(ledger, None, create=False)
                try:
                    tokens = [led.add_credential(f"analyst{i}") for i in range(CLIENTS)]
                finally:
                    led.close()
                up.append((urls, tokens))
            runs: list[list[dict]] = [[] for _ in CONFIGS]
            for r in range(args.rounds):
                for k in range(len(CONFIGS)):
                    i = (k + r) % len(CONFIGS)
                    runs[i].append(measure(*up[i], args.seconds))
                    kind, n, scope = CONFIGS[i]
                    rate = runs[i][-1]["rate"]
                    print(
                        f"  round {r + 1}: {kind} x{n} ({scope}): {rate:.0f} counts/s",
                        file=sys.stderr,
                    )
        rows = [summary(rs) for rs in runs]
        base = rows[0]["rate"]
        print(
            f"\n{CLIENTS} client processes, {ROWS:,} rows, {args.rounds} rounds of "
            f"{args.seconds:g} s, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n"
        )
        print(
            "| ledger | servers | rate limit | counts/s | rounds (min-max) | p50 ms | p95 ms "
            "| vs 1 SQLite server | not answered |"
        )
        print("|---|---:|---|---:|---:|---:|---:|---:|---|")
        for (kind, n, scope), r in zip(CONFIGS, rows, strict=True):
            errors = ", ".join(f"{v} {k}" for k, v in r["errors"].items()) or "0"
            shown = "per server" if scope == "server" or kind == "sqlite" else "shared"
            print(
                f"| {kind} | {n} | {shown} | {r['rate']:.0f} | {r['low']:.0f}-{r['high']:.0f} | "
                f"{r['p50']:.1f} | {r['p95']:.1f} | {r['rate'] / base:.2f}x | {errors} |"
            )
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.directory, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
