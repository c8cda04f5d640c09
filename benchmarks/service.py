"""Service benchmark: what HTTP adds to a count, throughput with concurrent analysts, and
the time from launching ``dpcurator serve --demo`` to answered requests.

    .venv/bin/python benchmarks/service.py [--quick]

1. Latency of ``POST /v1/count`` over 10^6 rows (--quick: 10^5) through
   :class:`dpcurator.client.Client` against a real ``dpcurator serve`` subprocess on
   127.0.0.1, beside the in-process ``AnalystSession.count`` of a :class:`Curator` on the
   same file in the same run. Budget PureDP(1e9), every count costs epsilon 1.0, so
   nothing is refused; both ledgers are durable SQLite files in the same temp directory.
   Each server is measured twice: as shipped, and with TCP_NODELAY on its socket (see
   ``NODELAY``), which removes a delayed-ACK stall of about 40 ms per response.
2. Throughput (answered requests per second) with 1, 4 and 16 concurrent clients, each a
   thread with its own Client and its own analyst token, on 10^5 and 10^6 rows (both
   server variants); then in-process threads on one Curator, the backend counting
   concurrently (a cursor per count) or serialised (one lock, as it did before).
3. Time from launching a fresh ``dpcurator serve --demo --port 0`` to having answered,
   through the client, four counts at epsilon 0.4 (the demo's budget is epsilon 1).

Nothing here asserts a time; the tables are printed. Every server is stopped and every
temporary file removed, also on errors and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import duckdb
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpcurator import Curator
from dpcurator.client import Client
from dpcurator.errors import BudgetExceeded
from dpcurator.privacy import PureDP

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": [f"r{i}" for i in range(20)]},
        {"name": "channel", "type": "categorical", "values": [f"c{i}" for i in range(8)]},
        {"name": "week", "type": "integer", "min": 1, "max": 52},
    ]
}

#: The counts every measurement cycles through (each costs epsilon 1.0).
QUERIES = (
    "age < 50",
    "age >= 30 AND week <= 26",
    "sex = 'F' AND region IN ('r1', 'r2', 'r3')",
    "channel != 'c0' AND age BETWEEN 20 AND 60",
    "region = 'r7' AND week > 40",
    "age > 85 AND sex = 'M'",
    "channel IN ('c2', 'c5') AND region != 'r0'",
    "week BETWEEN 10 AND 20",
)
COST = 1.0
BIG = 1e9  # the budget: nothing is refused

#: The end-to-end example of part 3: (query, epsilon).
EXAMPLE = (("age < 50", 0.4), ("age < 30", 0.4), ("age > 40", 0.4), ("age > 85", 0.4))
#: Asked after the timed example: covers ages already covered by its first two queries.
OVERLAPS_BOTH = "age < 40"

SERVER_LIMITS = {"requests_per_second": 1_000_000, "burst": 1_000_000}


def _command() -> list[str]:
    script = Path(sys.executable).with_name("dpcurator")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dpcurator.cli"]


#: ``dpcurator serve`` with TCP_NODELAY set on its listening socket (inherited by every
#: accepted connection). The shipped command makes its socket with protocol 0, and
#: asyncio sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP, so each
#: response's body waits for the client's delayed ACK (about 40 ms on Linux); this
#: variant shows what HTTP costs without that stall.
NODELAY = """
import socket, sys
_listen = socket.socket.listen
def listen(self, *args):
    if self.family in (socket.AF_INET, socket.AF_INET6) and self.type == socket.SOCK_STREAM:
        self.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _listen(self, *args)
socket.socket.listen = listen
from dpcurator.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _serve(nodelay: bool) -> list[str]:
    return [sys.executable, "-c", NODELAY, "serve"] if nodelay else [*_command(), "serve"]


def fsync_ms(tmp: Path, n: int = 20) -> float:
    """Median time of one fsync of a small write in the temp directory (the ledger
    commits each charge and each answer durably, so this is part of every count)."""
    times = []
    with open(tmp / "fsync.probe", "wb") as f:
        for _ in range(n):
            f.write(b"x" * 100)
            f.flush()
            t = time.perf_counter()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - t)
    (tmp / "fsync.probe").unlink()
    return float(np.median(times) * 1e3)


# --- data ---------------------------------------------------------------------------------


def make_data(tmp: Path, n: int) -> Path:
    """A Parquet file of ``n`` random rows over SCHEMA."""
    rng = np.random.default_rng(n)
    cols = {}
    for attr in SCHEMA["attributes"]:
        if attr["type"] == "integer":
            cols[attr["name"]] = pa.array(rng.integers(attr["min"], attr["max"] + 1, n), pa.int64())
        else:
            values = np.asarray(attr["values"], dtype=object)
            cols[attr["name"]] = pa.array(values[rng.integers(0, len(values), n)], pa.string())
    path = tmp / f"data-{n}.parquet"
    pq.write_table(pa.table(cols), path)
    return path


# --- a real server ------------------------------------------------------------------------


class Server:
    """A ``dpcurator serve`` subprocess; its stdout lines are read by a thread, its log
    (stderr) goes to a file."""

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        *,
        nodelay: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*_serve(nodelay), *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = ""
        self.output: list[str] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_ready(self, timeout: float = 300.0) -> str:
        """Wait for ``listening on URL``; the URL."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the server did not start in {timeout:.0f} s")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(timeout=10)
                raise RuntimeError(
                    f"the server exited ({self.proc.returncode}):\n"
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            self.output.append(line)
            m = re.match(r"listening on (\S+)", line)
            if m:
                self.url = m.group(1)
                return self.url

    def stop(self) -> None:
        """SIGINT (uvicorn's graceful shutdown, which closes the curator and deletes a
        demo ledger), then SIGKILL if it is still running after 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._reader.join(timeout=5)
        self._log.close()


def start_bench_server(
    tmp: Path,
    data: Path,
    schema: Path,
    tag: str,
    *,
    nodelay: bool = False,
    env: dict[str, str] | None = None,
    workers: int = 1,
) -> tuple[Server, Path]:
    """A ``dpcurator serve`` of this benchmark's limits (``env``: the environment it runs
    in, e.g. another source tree on PYTHONPATH; ``workers``: its processes), and its
    ledger."""
    config = tmp / f"bench-{tag}.toml"
    limits = dict(SERVER_LIMITS, **({"workers": workers} if workers > 1 else {}))
    config.write_text("[server]\n" + "".join(f"{k} = {v}\n" for k, v in limits.items()))
    ledger = tmp / f"ledger-{tag}.db"
    args = [
        "--data", str(data), "--schema", str(schema), "--epsilon", str(BIG),
        "--ledger", str(ledger), "--config", str(config), "--host", "127.0.0.1", "--port", "0",
    ]  # fmt: skip
    return Server(args, tmp / f"server-{tag}.log", nodelay=nodelay, env=env), ledger


def add_analysts(url: str, ledger: Path, n: int, env: dict[str, str] | None = None) -> list[str]:
    """One administrator with ``dpcurator analysts add --admin``, then ``n`` analysts
    through ``POST /v1/admin/analysts``; their tokens."""
    out = subprocess.run(
        [*_command(), "analysts", "add", "bench-admin", "--ledger", str(ledger), "--admin",
         "--json"],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    admin = json.loads(out.stdout.strip().splitlines()[-1])["token"]
    tokens = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as http:
        for i in range(n):
            r = http.post("/v1/admin/analysts", json={"name": f"bench{i}"})
            r.raise_for_status()
            tokens.append(r.json()["token"])
    return tokens


# --- measurements -------------------------------------------------------------------------


def percentiles(seconds: Sequence[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def timed(count: Callable[[str], object], n: int, warm: int) -> list[float]:
    for i in range(warm):
        count(QUERIES[i % len(QUERIES)])
    times = []
    for i in range(n):
        q = QUERIES[i % len(QUERIES)]
        t = time.perf_counter()
        count(q)
        times.append(time.perf_counter() - t)
    return times


def concurrent(
    workers: Sequence[Callable[[str], object]], duration: float
) -> tuple[int, list[float], int, float]:
    """Run every worker in its own thread, all started at once, each sending requests
    one after another until ``duration`` seconds have passed; the requests in flight
    then finish and count. (answers, their latencies in seconds, errors, seconds from
    the start to the last answer): answers / seconds is the throughput, without the
    bias of dropping the requests that straddle the end."""
    n = len(workers)
    barrier = threading.Barrier(n + 1)
    start_end = [0.0, 0.0]
    latencies: list[list[float]] = [[] for _ in range(n)]
    last = [0.0] * n
    errors = [0] * n

    def run(i: int) -> None:
        work = workers[i]
        barrier.wait()
        end = start_end[1]
        j = i
        while True:
            t = time.perf_counter()
            if t >= end:
                return
            try:
                work(QUERIES[j % len(QUERIES)])
            except Exception:
                errors[i] += 1
            last[i] = time.perf_counter()
            latencies[i].append(last[i] - t)
            j += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start_end[0] = time.perf_counter()
    start_end[1] = start_end[0] + duration
    barrier.wait()
    for t in threads:
        t.join()
    done = [x for per in latencies for x in per]
    return len(done), done, sum(errors), max(max(last), start_end[1]) - start_end[0]


def alternate(
    variants: Sequence[tuple[Callable[[], object], Sequence[Callable[[str], object]]]],
    duration: float,
    slices: int,
) -> list[tuple[float, float, int]]:
    """Run each variant ``(prepare, workers)`` for ``duration`` seconds in all, in
    ``slices`` turns taken alternately, so that a change in the machine's background load
    weighs on every variant alike; per variant (answers per second, p50 ms, errors)."""
    tallies: list[tuple[int, list[float], int, float]] = [(0, [], 0, 0.0) for _ in variants]
    for s in range(slices):
        for k in range(len(variants)):
            v = (s + k) % len(variants)
            prepare, workers = variants[v]
            prepare()
            if s == 0:
                for i, w in enumerate(workers):  # warm: a connection, a cursor
                    w(QUERIES[i % len(QUERIES)])
            n, lat, err, secs = concurrent(workers, duration / slices)
            done, lats, errs, total = tallies[v]
            tallies[v] = (done + n, lats + lat, errs + err, total + secs)
    return [
        (done / total, float(np.percentile(lats, 50) * 1e3) if lats else float("nan"), errs)
        for done, lats, errs, total in tallies
    ]


class CountGate:
    """Puts every backend count of a curator under one lock while ``serial`` is True, as
    the backend counted before it used a cursor per call (a comparison in the same run)."""

    def __init__(self, curator: Curator) -> None:
        self.serial = False
        self._lock = threading.Lock()
        self._patched = []
        for be in curator._backends.values():
            for name in ("counts", "clipped_sum"):
                original = getattr(be, name)

                def gated(*a, _f=original, **kw):
                    if not self.serial:
                        return _f(*a, **kw)
                    with self._lock:
                        return _f(*a, **kw)

                setattr(be, name, gated)
                self._patched.append((be, name))

    def set(self, serial: bool) -> Callable[[], None]:
        def prepare() -> None:
            self.serial = serial

        return prepare

    def close(self) -> None:
        for be, name in self._patched:
            delattr(be, name)


# --- the parts ----------------------------------------------------------------------------

VARIANTS = (("serve as shipped", False), ("serve + TCP_NODELAY", True))


Target = tuple[str, list[str]]  # a server's URL and its analysts' tokens


@contextlib.contextmanager
def bench_servers(
    tmp: Path, data: Path, schema: Path, rows: int, tokens: int
) -> Iterator[list[Target]]:
    """Both server variants on one data file, each with ``tokens`` analysts."""
    servers: list[Server] = []
    try:
        targets = []
        for _, nodelay in VARIANTS:
            server, ledger = start_bench_server(
                tmp, data, schema, f"{rows}-{nodelay}", nodelay=nodelay
            )
            servers.append(server)
            url = server.wait_ready()
            targets.append((url, add_analysts(url, ledger, tokens)))
        yield targets
    finally:
        for server in servers:
            server.stop()


def part_latency(curator: Curator, targets: Sequence[Target], rows: int, n: int, warm: int):
    """The in-process session and both servers answer in turn, one count each, so that
    any background load weighs on all three alike; also the paired differences."""
    print(
        f"1. latency of one count over {rows:,} rows (epsilon {COST} each, budget "
        f"PureDP({BIG:g}); {n} rounds"
    )
    print(
        f"   after {warm} warm-up, cycling {len(QUERIES)} queries; in each round the three "
        "paths answer the same"
    )
    print("   query one after the other, in a rotating order)")
    session = curator.analyst("bench")
    clients = [Client(url, tokens[0]) for url, tokens in targets]
    try:
        paths: list[Callable[[str], object]] = [
            lambda q: session.count(q, epsilon=COST),
            *(lambda q, c=c: c.count(q, epsilon=COST) for c in clients),
        ]
        for i in range(warm):
            for path in paths:
                path(QUERIES[i % len(QUERIES)])
        times: list[list[float]] = [[] for _ in paths]
        for i in range(n):
            q = QUERIES[i % len(QUERIES)]
            for k in range(len(paths)):
                j = (i + k) % len(paths)
                t = time.perf_counter()
                paths[j](q)
                times[j].append(time.perf_counter() - t)
        # the HTTP round trip of an authenticated route that counts nothing
        bare = [timed(lambda q, c=c: c.remaining(), n // 2, warm) for c in clients]
    finally:
        for c in clients:
            c.close()
    i50, i95 = percentiles(times[0])
    print(f"   {'path':<48} | {'p50 ms':>8} | {'p95 ms':>8}")
    print(f"   {'in-process AnalystSession.count':<48} | {i50:>8.2f} | {i95:>8.2f}")
    for (label, _), counts, b in zip(VARIANTS, times[1:], bare, strict=True):
        (h50, h95), (b50, b95) = percentiles(counts), percentiles(b)
        print(f"   {'Client.count, ' + label:<48} | {h50:>8.2f} | {h95:>8.2f}")
        print(f"   {'  GET /v1/budget (counts nothing), ' + label:<48} | {b50:>8.2f} | {b95:>8.2f}")
    print(f"   {'what HTTP adds (p50 minus p50)':<48} |")
    for (label, _), counts in zip(VARIANTS, times[1:], strict=True):
        paired = np.median(np.subtract(counts, times[0])) * 1e3
        d50 = percentiles(counts)[0] - i50
        print(
            f"   {'  ' + label:<48} | {d50:>8.2f} |   (median of paired differences {paired:.2f})"
        )
    print("   (target: what HTTP adds <= 5 ms at p50)")
    print()


def http_throughput(
    targets: Sequence[Target], clients: Sequence[int], duration: float, slices: int
) -> dict[int, list[tuple[float, float, int]]]:
    """{clients: [(req/s, p50 ms, errors) per server variant]}."""
    out = {}
    for n in clients:
        pools = [[Client(url, tokens[i]) for i in range(n)] for url, tokens in targets]
        try:
            variants = [
                (lambda: None, [lambda q, c=c: c.count(q, epsilon=COST) for c in pool])
                for pool in pools
            ]
            out[n] = alternate(variants, duration, slices)
        finally:
            for pool in pools:
                for c in pool:
                    c.close()
    return out


def print_throughput(
    results: dict[int, dict[int, list[tuple[float, float, int]]]], duration: float, slices: int
) -> None:
    limits = ", ".join(f"{k} = {v}" for k, v in SERVER_LIMITS.items())
    print(
        f"2. throughput: answered counts per second, {duration:g} s per cell, taken in "
        f"{slices} slices"
    )
    print("   alternating between the columns; each client is a thread with its own Client and")
    print(f"   its own analyst token; the servers run with --config [server] {limits},")
    print("   so that the per-analyst rate limit (default 20 requests/s, burst 40) caps nothing")
    head = " | ".join(f"{label:^19}" for label, _ in VARIANTS)
    print(f"   {'':>10} | {'':>7} | {head}")
    sub = " | ".join(f"{'req/s':>8} | {'p50 ms':>8}" for _ in VARIANTS)
    print(f"   {'rows':>10} | {'clients':>7} | {sub} | errors")
    for rows in sorted(results):
        for n, cells in results[rows].items():
            text = " | ".join(f"{r:>8.1f} | {p:>8.2f}" for r, p, _ in cells)
            errors = sum(e for _, _, e in cells)
            print(f"   {rows:>10,} | {n:>7} | {text} | {errors}")


def inproc_throughput(
    curator: Curator, rows: int, clients: Sequence[int], duration: float, slices: int
) -> None:
    print(f"   in process: one Curator over {rows:,} rows, a session per thread, the backend")
    print("   counting concurrently (a cursor per count) or serialised (one lock, as before)")
    print(f"   {'threads':>7} | {'concurrent req/s':>16} | {'p50 ms':>8} | "
          f"{'serialised req/s':>16} | {'p50 ms':>8}")  # fmt: skip
    gate = CountGate(curator)
    try:
        for n in clients:
            sessions = [curator.analyst(f"thread{i}") for i in range(n)]
            workers = [lambda q, s=s: s.count(q, epsilon=COST) for s in sessions]
            (r1, p1, e1), (r2, p2, e2) = alternate(
                [(gate.set(False), workers), (gate.set(True), workers)], duration, slices
            )
            errors = f"   ({e1 + e2} errors)" if e1 + e2 else ""
            print(f"   {n:>7} | {r1:>16.1f} | {p1:>8.2f} | {r2:>16.1f} | {p2:>8.2f}{errors}")
    finally:
        gate.close()
    print()


def demo_once(tmp: Path, run: int) -> tuple[float, float, list[str]]:
    t0 = time.perf_counter()
    server = Server(["--demo", "--port", "0"], tmp / f"demo-{run}.log")
    try:
        url = server.wait_ready()
        listening = time.perf_counter() - t0
        token = next(
            m.group(1)
            for line in server.output
            if (m := re.search(r"analyst token \(an administrator\): (\S+)", line))
        )
        outcomes = []
        with Client(url, token) as client:
            for q, eps in EXAMPLE:
                try:
                    client.count(q, epsilon=eps)
                    outcomes.append(f"{q!r} admitted")
                except BudgetExceeded:
                    outcomes.append(f"{q!r} refused")
            total = time.perf_counter() - t0
            try:  # outside the timing: a query that does overlap both of the first two
                client.count(OVERLAPS_BOTH, epsilon=0.4)
                outcomes.append(f"then {OVERLAPS_BOTH!r} admitted")
            except BudgetExceeded:
                outcomes.append(f"then {OVERLAPS_BOTH!r} refused")
    finally:
        server.stop()
    return listening, total, outcomes


def part_demo(tmp: Path, runs: int) -> None:
    example = ", ".join(f"{q!r}" for q, _ in EXAMPLE)
    print("3. from launching `dpcurator serve --demo --port 0` (as shipped) to the last answer")
    print(f"   of {example} at epsilon 0.4 each, through the")
    print("   client (the demo's budget is epsilon 1; target: under 10 s)")
    print(f"   {'run':>3} | {'listening s':>11} | {'answered s':>10}")
    outcomes: list[str] = []
    for run in range(runs):
        listening, total, outcomes = demo_once(tmp, run)
        print(f"   {run + 1:>3} | {listening:>11.2f} | {total:>10.2f}")
    print("   outcomes: " + "; ".join(outcomes))
    print("   ('age > 40' is admitted: it is disjoint from 'age < 30', so no age is covered by")
    print("   more than two of the first three queries, 0.8 <= 1; 'age < 40' covers ages 17-29,")
    print("   already covered by 'age < 50' and 'age < 30', and would bring them to 1.2)")
    print()


def main() -> None:
    quick = "--quick" in sys.argv
    tmp = Path(tempfile.mkdtemp(prefix="dpcurator-bench-service-"))
    try:
        print(
            f"dpcurator service benchmark{' (--quick)' if quick else ''}: {os.cpu_count()} "
            f"CPUs, Python {platform.python_version()}, DuckDB {duckdb.__version__}, "
            "client and server on 127.0.0.1"
        )
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"load average (1, 5, 15 min) at start: {load}; one fsync in the temp "
            f"directory: {fsync_ms(tmp):.2f} ms (median)"
        )
        print()
        schema = tmp / "schema.json"
        schema.write_text(json.dumps(SCHEMA))
        sizes = (100_000,) if quick else (100_000, 1_000_000)
        datasets = [(n, make_data(tmp, n)) for n in sizes]
        big_rows, big_data = datasets[-1]
        clients = (1, 4, 16)
        duration, slices = (1.0, 2) if quick else (6.0, 6)
        results = {}
        with Curator.open(
            data=big_data, schema=schema, budget=PureDP(BIG), ledger=tmp / "inproc.db"
        ) as curator:
            for rows, data in reversed(datasets):  # the largest first: part 1 uses it
                with bench_servers(tmp, data, schema, rows, max(clients)) as targets:
                    if rows == big_rows:
                        n, warm = (40, 5) if quick else (400, 20)
                        part_latency(curator, targets, rows, n, warm)
                    results[rows] = http_throughput(targets, clients, duration, slices)
            print_throughput(results, duration, slices)
            inproc_throughput(curator, big_rows, clients, duration, slices)
        part_demo(tmp, runs=1 if quick else 3)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average (1, 5, 15 min) at end: {load}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
