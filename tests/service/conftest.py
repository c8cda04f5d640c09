"""Real ``dpcurator serve`` processes on 127.0.0.1 for the service tests.

``start_server(directory, ...)`` runs ``python -m dpcurator.cli serve ... --port 0`` on a
small generated CSV, reads the ``listening on URL`` line, and returns a :class:`Server`
that can add analysts (with ``dpcurator analysts add --json``), count the ledger's
charges (read only: sqlite3, or psycopg for a PostgreSQL ledger) and stop or kill the
process. The module-scoped ``server``
fixture is shared by the tests that do not conflict; tests that need their own budget,
data or limits start their own and stop them at the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

from dpcurator.cli import main
from dpcurator.client import Client

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")

#: The public schema of the generated people (every server of these tests uses it).
SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": ["north", "south", "east", "west"]},
        {"name": "score", "type": "integer", "min": 0, "max": 9},
    ]
}

#: A config that lets the shared server take many requests a second from one token.
FAST = "[server]\nrequests_per_second = 10000\nburst = 10000\n"


def write_people(directory: Path, rows: int = 600, variant: int = 7) -> tuple[Path, Path]:
    """A CSV of ``rows`` generated people (``variant`` picks the generator's stream) and
    the schema file, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(variant)
    data = directory / f"people-{variant}-{rows}.csv"
    lines = ["age,sex,region,score"]
    for _ in range(rows):
        lines.append(
            f"{rng.integers(0, 100)},{rng.choice(['F', 'M'])},"
            f"{rng.choice(['north', 'south', 'east', 'west'])},{rng.integers(0, 10)}"
        )
    data.write_text("\n".join(lines) + "\n")
    schema = directory / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def cli(*argv: object) -> tuple[int, str, str]:
    """``dpcurator ARGV`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def add_analyst(ledger: Path | str, name: str, *flags: object) -> str:
    """A new token for ``name`` from ``dpcurator analysts add NAME --ledger L --json``."""
    code, out, err = cli("analysts", "add", name, "--ledger", ledger, "--json", *flags)
    assert code == 0, err
    d = json.loads(out.strip().splitlines()[-1])
    assert d["name"] == name
    return d["token"]


def charges_in(ledger: Path | str) -> int:
    """How many charges the ledger holds (a read-only connection of its own)."""
    if str(ledger).startswith("postgresql://"):
        import psycopg

        url, _, schema = str(ledger).rpartition("schema=")
        with psycopg.connect(url.rstrip("?&"), autocommit=True) as con:
            return con.execute(f'SELECT count(*) FROM "{schema}".charges').fetchone()[0]
    ledger = Path(ledger)
    db = sqlite3.connect(f"{ledger.absolute().as_uri()}?mode=ro", uri=True, timeout=60)
    try:
        return db.execute("SELECT count(*) FROM charges").fetchone()[0]
    finally:
        db.close()


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    ledger: Path | str
    stdout: list[str]
    stderr: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, *flags: object) -> str:
        self.tokens[name] = add_analyst(self.ledger, name, *flags)
        return self.tokens[name]

    def http(self, who: str | None = None, *, headers: dict | None = None) -> httpx.Client:
        """An httpx client with ``who``'s token (or the given headers, or none)."""
        if who is not None:
            headers = {"Authorization": f"Bearer {self.tokens[who]}", **(headers or {})}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)

    def client(self, who: str, **kw: object) -> Client:
        return Client(self.url, self.tokens[who], **kw)

    def charges(self) -> int:
        return charges_in(self.ledger)

    def log(self) -> str:
        return self.stderr.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=20)


def start_server(
    directory: Path,
    *args: object,
    data: tuple[Path, Path] | bool | None = None,
    ledger: Path | str | None = None,
    budget: Sequence[object] = ("--epsilon", "100"),
    config: str | None = None,
    timeout: float = 60.0,
    port: int = 0,
) -> Server:
    """Start ``dpcurator serve`` on ``port`` (0: a free one) and wait for its
    ``listening on`` line. ``ledger``: a file (default: one in ``directory``) or a URL;
    ``data=False``: the tables come from ``config``."""
    directory.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = write_people(directory)
    ledger = ledger or directory / "ledger.db"
    cmd = [sys.executable, "-m", "dpcurator.cli", "serve", "--port", port, "--ledger", ledger]
    if data is not False:
        assert isinstance(data, tuple)
        cmd += ["--data", data[0], "--schema", data[1]]
    cmd += [*budget]
    if config is not None:
        cfg = directory / f"server-{time.monotonic_ns()}.toml"
        cfg.write_text(config)
        cmd += ["--config", cfg]
    cmd += list(args)
    if (
        str(ledger).startswith("postgresql://")
        and "--anchor" not in cmd
        and not config_anchor(config)
    ):
        cmd += ["--anchor", directory / "ledger.anchor"]  # each replica its own, as on hosts
    errfile = directory / f"server-{time.monotonic_ns()}.log"
    with open(errfile, "w") as err:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=directory,
        )
    lines: list[str] = []
    seen: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            seen.put(line.rstrip("\n"))
        seen.put(None)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = seen.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            raise RuntimeError(
                f"the server did not start in {timeout}s: {errfile.read_text()}"
            ) from None
        if line is None:
            proc.wait(timeout=20)
            raise RuntimeError(f"the server exited ({proc.returncode}): {errfile.read_text()}")
        if line.startswith("listening on "):
            url = line.split()[-1]
            where = ledger if str(ledger).startswith("postgresql://") else Path(ledger)
            return Server(url, proc, where, lines, errfile)


def config_anchor(config: str | None) -> bool:
    return config is not None and "anchor =" in config


@contextlib.contextmanager
def running(directory: Path, *args: object, **kw: object) -> Iterator[Server]:
    s = start_server(directory, *args, **kw)  # type: ignore[arg-type]
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per module, budget epsilon 100, no practical rate limit, analysts
    ``root`` (an administrator), ``alice`` and ``bob``."""
    with running(tmp_path_factory.mktemp("served"), config=FAST) as s:
        s.add("root", "--admin")
        s.add("alice")
        s.add("bob")
        yield s


def assert_error(r: httpx.Response, status: int, reason: str | None = None) -> dict:
    """``r`` is an error of ``status`` whose body is exactly {"error", "message"}."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error", "message"}, body
    assert isinstance(body["error"], str) and isinstance(body["message"], str)
    assert body["message"].strip() and "\n" not in body["message"]
    if reason is not None:
        assert body["error"] == reason, body
    return body


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """A server with its gate (dpcurator.service.gate) and one without, on one data set,
    each with analysts ``ann`` and ``bo``: the same request to both must get the same
    answer."""
    base = tmp_path_factory.mktemp("gate")
    data = write_people(base)
    with (
        running(base / "gated", data=data, config=FAST) as gated,
        running(base / "plain", data=data, config=FAST + "gate = false\n") as plain,
    ):
        for s in (gated, plain):
            s.add("ann")
            s.add("bo")
        yield gated, plain
