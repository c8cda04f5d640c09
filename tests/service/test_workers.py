"""``dpcurator serve --workers N``: N real server processes on one port and one ledger.

Together they spend one budget exactly (concurrent requests over fresh connections,
admitted exactly as far as the budget goes) and one rate limit per analyst; a worker
killed by SIGKILL is replaced while the others answer; SIGTERM stops every worker; a
supervisor killed by SIGKILL takes its workers with it; bad values and a worker that
cannot start give one line and exit 2."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from .conftest import FAST, running, start_server, write_people


def workers_of(pid: int) -> set[int]:
    """The worker processes of the supervisor ``pid`` (its children)."""
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except FileNotFoundError:
        return set()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def _still(pids: set[int], s) -> str:
    """What a failure says: each pid still alive, its state and command, the log's end."""
    said = []
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            said.append(f"{pid}: {stat[: stat.index(')') + 3]} {command!r}")
    return "; ".join(said) + "\nlog: " + s.log()[-3000:]


def wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def fresh_post(url: str, token: str, body: dict) -> int:
    """A request on a connection of its own (so that any worker may take it)."""
    with httpx.Client(base_url=url, timeout=120) as h:
        return h.post(
            "/v1/count", json=body, headers={"Authorization": f"Bearer {token}"}
        ).status_code


def test_workers_spend_one_budget_exactly(tmp_path):
    """Budget epsilon 1, sixteen requests at once of epsilon 0.25 on one region, each on
    its own connection: exactly four are answered and charged, whichever worker took
    them; one `listening on` line, after the workers' count."""
    config = FAST + "workers = 2\n"
    with running(tmp_path, budget=("--epsilon", "1"), config=config) as s:
        assert len(workers_of(s.proc.pid)) == 2
        assert sum(line.startswith("listening on ") for line in s.stdout) == 1
        assert any(line.startswith("workers: 2 processes") for line in s.stdout)
        token = s.add("ann")
        codes: list[int] = []
        lock = threading.Lock()

        def ask() -> None:
            code = fresh_post(s.url, token, {"query": "age < 50", "epsilon": 0.25})
            with lock:
                codes.append(code)

        threads = [threading.Thread(target=ask) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(codes) == [200] * 4 + [409] * 12
        assert s.charges() == 4


def test_workers_share_an_analysts_rate(tmp_path):
    """Burst 3 and a refill of one request in 1,000 s: twelve requests on fresh
    connections, spread over both workers, are served three times in all."""
    config = "[server]\nrequests_per_second = 0.001\nburst = 3\nworkers = 2\n"
    with running(tmp_path, config=config) as s:
        token = s.add("ann")
        codes = [fresh_post(s.url, token, {"query": "age < 50", "epsilon": 0.1}) for _ in range(12)]
        assert codes.count(200) == 3 and codes.count(429) == 9
        assert "is shared by every server on this ledger" in s.log()
        assert (tmp_path / "ledger.db.rate").exists()


def test_a_killed_worker_is_replaced_and_sigterm_stops_them_all(tmp_path):
    with running(tmp_path, config=FAST + "workers = 2\n") as s:
        token = s.add("ann")
        first = workers_of(s.proc.pid)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        # the other worker answers meanwhile, and a new worker takes the victim's place
        assert fresh_post(s.url, token, {"query": "age < 30", "epsilon": 0.1}) == 200
        assert wait_for(lambda: len(workers_of(s.proc.pid) - first) == 1)
        assert wait_for(lambda: f"(pid {victim}) ended (signal 9); starting another" in s.log())
        assert wait_for(
            lambda: fresh_post(s.url, token, {"query": "age < 20", "epsilon": 0.1}) == 200
        )
        now = workers_of(s.proc.pid)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=60) == 0
        assert wait_for(lambda: not any(alive(p) for p in now), 10)
        assert "Traceback" not in s.log()


def test_workers_stop_when_their_supervisor_is_killed(tmp_path):
    s = start_server(tmp_path, config=FAST + "workers = 2\n")
    try:
        children = workers_of(s.proc.pid)
        assert len(children) == 2
        s.kill9()
        assert wait_for(lambda: not any(alive(p) for p in children), 30), _still(children, s)
    finally:
        s.stop()


@pytest.mark.parametrize(
    ("args", "config", "said"),
    [
        (["--workers", "0"], None, "--workers must be an integer from 1 to 64, got 0"),
        (["--workers", "65"], None, "--workers must be an integer from 1 to 64, got 65"),
        ([], "[server]\nworkers = true\n", "[server] workers must be an integer from 1 to 64"),
        ([], '[server]\nworkers = "2"\n', "[server] workers must be an integer from 1 to 64"),
        (
            [],
            "[server]\nworkers = 1e400\n",
            "[server] workers must be an integer from 1 to 64, got inf",
        ),
        ([], "[server]\nworkers = 5e-324\n", "[server] workers must be an integer from 1 to 64"),
        (
            [],
            "[server]\nworkers = {a = [[1]]}\n",
            "[server] workers must be an integer from 1 to 64",
        ),
        (["--workers=1e400"], None, "argument --workers: invalid int value"),
        (["--workers=-1"], None, "--workers must be an integer from 1 to 64, got -1"),
        (["--workers", "9" * 30], None, "--workers must be an integer from 1 to 64"),
        (["--worker", "9" * 30 + ":1:0"], None, "--worker is for the workers dpcurator serve"),
        (["--worker", "0:1:0"], None, "--worker is for the workers dpcurator serve --workers"),
        (["--worker", "x"], None, "--worker is for the workers dpcurator serve --workers"),
        (["--workers", "2", "--demo"], None, "--workers: the demo serves from one process"),
    ],
)
def test_bad_workers_are_refused_in_one_line(tmp_path, args, config, said):
    data = write_people(tmp_path)
    cmd = [sys.executable, "-m", "dpcurator.cli", "serve", "--port", "0", "--epsilon", "1"]
    cmd += ["--data", str(data[0]), "--schema", str(data[1]), "--ledger", str(tmp_path / "l.db")]
    if config is not None:
        (tmp_path / "s.toml").write_text(config)
        cmd += ["--config", str(tmp_path / "s.toml")]
    out = subprocess.run(
        cmd + args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], out.stderr
    assert "listening on" not in out.stdout
    assert not (tmp_path / "l.db").exists()


def test_a_worker_that_cannot_start_is_reported_once(tmp_path):
    """The first worker opens the data alone: a missing file is its one-line error, the
    supervisor's exit status 2, and no other worker is started."""
    _, schema = write_people(tmp_path)
    cmd = [sys.executable, "-m", "dpcurator.cli", "serve", "--port", "0", "--epsilon", "1"]
    cmd += ["--data", str(tmp_path / "missing.csv"), "--schema", str(schema)]
    cmd += ["--ledger", str(tmp_path / "l.db"), "--workers", "3"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "missing.csv" in lines[0], out.stderr
    assert "listening on" not in out.stdout


def test_a_replacement_worker_uses_the_configuration_the_command_started_with(tmp_path):
    """The config file edited while the workers run (here: made unreadable as TOML) and
    a worker killed: its replacement starts from the copy the supervisor took at start,
    so the workers cannot split between two configurations (two ledgers, two rates)."""
    with running(tmp_path, config=FAST + "workers = 2\n") as s:
        token = s.add("ann")
        cfg = next(Path(a) for a in s.proc.args if str(a).endswith(".toml"))
        cfg.write_text("this is [not toml\n")
        first = workers_of(s.proc.pid)
        os.kill(min(first), signal.SIGKILL)
        assert wait_for(lambda: len(workers_of(s.proc.pid) - first) == 1)
        (new,) = workers_of(s.proc.pid) - first
        assert wait_for(
            lambda: fresh_post(s.url, token, {"query": "age < 20", "epsilon": 0.1}) == 200
        )
        time.sleep(2)
        assert alive(new) and new in workers_of(s.proc.pid)
        assert "status 2" not in s.log() and "error" not in s.log()
