"""Can some analysts slow the others? Hard requests and large batches next to trivial ones.

    .venv/bin/python benchmarks/stall.py [--before TREE] [--seconds 20] [--charges 20000]

A real ``dpcurator serve`` per source tree (``--before TREE``: another checkout, measured
in the same run), two tables: ``hard`` (12 categorical attributes x 20 values, 2,000
synthetic rows) and ``easy`` (one integer attribute). Budget epsilon 1000; the hard
table's requests cost 3 each (0.003 of the budget, as on a budget of 1), so that after a
few hundred of them the levels' bound no longer admits and every request needs the exact
maximum-overlap computation (NP-hard on such queries).

Phase 1, flood: analysts A, B and C, four threads each, send ORs of random 3-attribute
``IN`` conjunctions on ``hard`` (within their rate limit: 4 requests a second each
thread), and a batch of 2,000 such counts every few seconds; analyst V sends a trivial
count on ``easy`` every 0.2 s, and two unauthenticated clients a request every 0.1 s
(one with a malformed token, one with a well-formed token whose key no one holds). The
measuring clients (V and the unauthenticated ones) run in a process of their own, so
that their timings do not include waits for the attackers' interpreter lock.

Phase 2, a large ledger: ``--charges`` counts are charged in batches, then analyst A
sends a batch of 600 counts while V counts and the unauthenticated client knocks.

The table gives, per tree: V's latency (p50, p99, max), the unauthenticated 401's
latency (p50, p99, max), the hard requests' latency (p50, p99, max: how far a request
outlives the server's time limit) and what they got (answered, refused, undecided), and phase 2's
batch time. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
ATTRS = [f"c{i}" for i in range(12)]
VALUES = [f"v{j}" for j in range(20)]


def conjunction(rng: random.Random) -> str:
    parts = []
    for a in rng.sample(ATTRS, 3):
        vals = [v for v in VALUES if rng.random() < 0.5] or [rng.choice(VALUES)]
        parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
    return " AND ".join(parts)


def hard_or(rng: random.Random) -> str:
    return " OR ".join(f"({conjunction(rng)})" for _ in range(rng.randint(2, 4)))


def write_data(tmp: Path) -> None:
    g = np.random.default_rng(0)
    pd.DataFrame({a: g.choice(VALUES, 2000) for a in ATTRS}).to_csv(tmp / "hard.csv", index=False)
    schema = {"attributes": [{"name": a, "type": "categorical", "values": VALUES} for a in ATTRS]}
    (tmp / "hard.json").write_text(json.dumps(schema))
    pd.DataFrame({"x": g.integers(0, 10, 2000)}).to_csv(tmp / "easy.csv", index=False)
    (tmp / "easy.json").write_text(
        json.dumps({"attributes": [{"name": "x", "type": "integer", "min": 0, "max": 9}]})
    )


SERVE = [sys.executable, "-m", "dpcurator.cli", "serve", "--config", "server.toml"]
CONFIG = """
[budget]
epsilon = 1000
[server]
solver_time_limit = 5
max_queries = 100000
requests_per_second = 20
burst = 40
[tables.hard]
data = "hard.csv"
schema = "hard.json"
[tables.easy]
data = "easy.csv"
schema = "easy.json"
"""


class Server:
    def __init__(self, tree: Path, tmp: Path) -> None:
        tmp.mkdir()
        write_data(tmp)
        self.tree, self.tmp = tree, tmp
        self.ledger = tmp / "ledger.db"
        (tmp / "server.toml").write_text(CONFIG)
        self.env = dict(os.environ, PYTHONPATH=str(tree / "src"))
        self.proc = subprocess.Popen(
            [*SERVE, "--ledger", str(self.ledger), "--port", "0"],
            cwd=tmp,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("listening on "):
                self.url = line.split()[-1]
                break
        else:
            raise SystemExit(f"the server of {tree} did not start")
        # analysts added by another process, while the server runs
        self.tokens = {n: self._add(n) for n in ("A", "B", "C", "V")}

    def _add(self, name: str) -> str:
        cmd = [sys.executable, "-m", "dpcurator.cli", "analysts", "add", name]
        cmd += ["--ledger", str(self.ledger), "--json"]
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])["token"]

    def client(self, who: str | None) -> httpx.Client:
        headers = {} if who is None else {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=600)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed(client: httpx.Client, method: str, path: str, **kw: object) -> tuple[float, int]:
    t = time.perf_counter()
    r = client.request(method, path, **kw)  # type: ignore[arg-type]
    return time.perf_counter() - t, r.status_code


def fill(s: Server, n: int, seed: int, cost: float, step: int = 2000) -> None:
    rng = random.Random(seed)
    with s.client("A") as c:
        while n > 0:
            k = min(step, n)
            body = {"queries": [conjunction(rng) for _ in range(k)], "costs": [cost] * k}
            r = c.post("/v1/release", json={**body, "table": "hard"})
            if r.status_code == 409:  # the points are full: as far as it goes
                return
            if r.status_code != 200:
                raise SystemExit(f"filling the ledger failed: {r.status_code} {r.text[:300]}")
            n -= k
            time.sleep(0.1)


def probe(url: str, token: str) -> None:
    """The measuring clients (``--probe``), in a process of their own, so that their
    timings do not include waits for this benchmark's own interpreter lock (the
    attackers build 2,000-query batches in Python: measured in the same process, a
    401 answered in 5 ms could read 100 ms). Runs until a line or EOF on stdin, then
    prints their latencies as one JSON object."""
    out: dict[str, list[float]] = {"victim": [], "401": [], "401 key": []}
    stop = threading.Event()

    def client(tok: str | None) -> httpx.Client:
        headers = {} if tok is None else {"Authorization": f"Bearer {tok}"}
        return httpx.Client(base_url=url, headers=headers, timeout=600)

    def victim() -> None:
        with client(token) as c:
            i = 0
            while not stop.is_set():
                t, code = timed(
                    c,
                    "POST",
                    "/v1/count",
                    json={"query": f"x = {i % 10}", "epsilon": 0.001, "table": "easy"},
                )
                if code == 200:
                    out["victim"].append(t)
                i += 1
                time.sleep(0.2)

    def stranger(tok: str, key: str) -> None:
        with client(None) as c:
            while not stop.is_set():
                t, code = timed(c, "GET", "/v1/budget", headers={"Authorization": f"Bearer {tok}"})
                if code == 401:
                    out[key].append(t)
                time.sleep(0.1)

    threads = [
        threading.Thread(target=victim),
        threading.Thread(target=stranger, args=("dpc_nobody.x", "401")),
        # a token of the right form whose key no analyst holds: looked up in the ledger
        threading.Thread(target=stranger, args=(f"dpc_{'0' * 16}_{'x' * 43}", "401 key")),
    ]
    for t in threads:
        t.start()
    sys.stdin.readline()
    stop.set()
    for t in threads:
        t.join()
    print(json.dumps(out), flush=True)


@contextlib.contextmanager
def probing(s: Server, out: dict[str, list]) -> Iterator[None]:
    """:func:`probe` in a subprocess for the duration of the block; its latencies
    added to ``out``."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--probe", s.url, s.tokens["V"]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield
    finally:
        got, _ = proc.communicate("stop\n", timeout=600)
    for key, values in json.loads(got.strip().splitlines()[-1]).items():
        out[key].extend(values)


def phase_flood(s: Server, seconds: float) -> dict:
    out: dict[str, list] = {"victim": [], "401": [], "401 key": [], "hard": [], "codes": []}
    stop = threading.Event()

    def attacker(who: str, seed: int) -> None:
        rng = random.Random(seed)
        with s.client(who) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                if rng.random() < 0.1:
                    k = 2000
                    body = {
                        "queries": [conjunction(rng) for _ in range(k)],
                        "costs": [3.0] * k,
                        "table": "hard",
                    }
                    t, code = timed(c, "POST", "/v1/release", json=body)
                else:
                    t, code = timed(
                        c,
                        "POST",
                        "/v1/count",
                        json={"query": hard_or(rng), "epsilon": 3.0, "table": "hard"},
                    )
                out["hard"].append(t)
                out["codes"].append(code)
                time.sleep(max(0.0, 0.25 - (time.perf_counter() - t0)))

    threads = [
        threading.Thread(target=attacker, args=(who, 10 * k + i))
        for k, who in enumerate("ABC")
        for i in range(4)
    ]
    with probing(s, out):
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    return out


def phase_batch(s: Server, charges: int) -> dict:
    fill(s, charges, 99, 0.01)  # levels admit them all: 20,000 x 0.01 < 1000
    out: dict[str, list] = {"victim": [], "401": [], "401 key": []}
    rng = random.Random(7)
    body = {
        "queries": [conjunction(rng) for _ in range(600)],
        "costs": [0.001] * 600,
        "table": "hard",
    }
    with probing(s, out), s.client("A") as c:
        time.sleep(1.0)
        t, code = timed(c, "POST", "/v1/release", json=body)
        time.sleep(1.0)
    out["batch"] = [t, code]
    return out


def measure(tree: Path, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        s = Server(tree, tmp / "flood")
        try:
            fill(s, 340, 1, 3.0, step=50)  # the hard table's points near the budget
            flood = phase_flood(s, args.seconds)
        finally:
            s.stop()
        s = Server(tree, tmp / "batch")
        try:
            batch = phase_batch(s, args.charges)
        finally:
            s.stop()
    return {"flood": flood, "batch": batch}


def stats(xs: list[float]) -> str:
    if not xs:
        return f"{'-':>8} {'-':>8} {'-':>8}"
    p99 = sorted(xs)[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)]
    return f"{statistics.median(xs):8.3f} {p99:8.3f} {max(xs):8.3f}"


def main() -> None:
    if sys.argv[1:2] == ["--probe"]:
        probe(*sys.argv[2:4])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="another source tree, measured in the same run")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--charges", type=int, default=20_000)
    args = ap.parse_args()
    trees = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    results = {name: measure(tree, args) for name, tree in trees}
    print(f"\n{'seconds':>34} | {'p50':>8} {'p99':>8} {'max':>8}")
    for name, r in results.items():
        f, b = r["flood"], r["batch"]
        codes = Counter(f["codes"])
        print(f"{name}: flood ({args.seconds:g} s, 3 analysts x 4 threads, hard ORs and batches)")
        print(f"{'victim count':>34} | {stats(f['victim'])}  n={len(f['victim'])}")
        print(f"{'401, malformed token':>34} | {stats(f['401'])}  n={len(f['401'])}")
        print(f"{'401, unknown key':>34} | {stats(f['401 key'])}  n={len(f['401 key'])}")
        print(f"{'hard requests':>34} | {stats(f['hard'])}  {dict(sorted(codes.items()))}")
        print(f"{name}: a 600-count batch on a ledger of {args.charges} charges")
        print(f"{'the batch':>34} | {b['batch'][0]:8.3f} (status {b['batch'][1]})")
        print(f"{'victim count':>34} | {stats(b['victim'])}  n={len(b['victim'])}")
        print(f"{'401, malformed token':>34} | {stats(b['401'])}  n={len(b['401'])}")
        print(f"{'401, unknown key':>34} | {stats(b['401 key'])}  n={len(b['401 key'])}")
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()


if __name__ == "__main__":
    main()
