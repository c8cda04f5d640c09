"""The exact checks' search in worker processes: the same decisions as in threads, the
deadline enforced in the worker, a worker that dies or overruns replaced, nothing
charged for an undecided request, and no worker left behind by close.

Real curators over a real CSV file; the workers are real processes (forks of a fresh
template interpreter), killed here with real signals.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import itertools
import json
import math
import os
import pickle
import random
import signal
import subprocess
import termios
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.curator.solver_processes import NICENESS
from dpcurator.errors import BudgetExceeded, InvalidParameter, Undecided
from dpcurator.privacy import PureDP

VALUES = ["p", "q", "r", "s"]
ATTRS = ["c0", "c1", "c2", "c3"]


@pytest.fixture
def small(tmp_path):
    """Four categorical attributes of four values: 256 points, brute force is quick."""
    g = np.random.default_rng(4)
    data = tmp_path / "d.csv"
    pd.DataFrame({a: g.choice(VALUES, 200) for a in ATTRS}).to_csv(data, index=False)
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {"attributes": [{"name": a, "type": "categorical", "values": VALUES} for a in ATTRS]}
        )
    )
    return data, schema


def boolean_request(r: random.Random) -> str:
    def conj() -> str:
        parts = []
        for a in r.sample(ATTRS, 2):
            vals = r.sample(VALUES, r.randint(1, 3))
            parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
        return " AND ".join(parts)

    return " OR ".join(f"({conj()})" for _ in range(r.randint(2, 3)))


def decisions(small, tmp_path, name: str, processes: bool) -> tuple[list[bool], Curator]:
    data, schema = small
    c = Curator.open(
        data=data,
        schema=schema,
        budget=PureDP(6),
        ledger=tmp_path / name,
        solver_processes=processes,
    )
    if c._processes is not None:
        c._processes.local_cells = 0  # every search in a worker (the grid is small here)
        assert c._processes.start() == c._processes.workers  # not in the requests' threads
    r = random.Random(9)
    out = []
    for _ in range(40):
        try:
            c.count(boolean_request(r), epsilon=1.0)
            out.append(True)
        except BudgetExceeded:
            out.append(False)
    return out, c


def test_processes_decide_as_threads_do_and_as_brute_force_says(small, tmp_path):
    got, c = decisions(small, tmp_path, "p.db", True)
    try:
        want, t = decisions(small, tmp_path, "t.db", False)
        t.close()
        assert got == want and True in got and False in got
        # every point's loss within the budget, by brute force over the 256 points
        charges = c._filter.charges("data")
        for point in itertools.product(VALUES, repeat=4):
            x = dict(zip(ATTRS, point, strict=True))
            assert sum(ch.cost for ch in charges if ch.query.covers(x)) <= 6
        # and some of those decisions went through a worker
        assert c._processes is not None and c._processes.running >= 1
    finally:
        c.close()


def hard_curator(tmp_path, **kw) -> Curator:
    """A table of 12 attributes x 20 values whose points are near the budget: a new OR of
    conjunctions needs the exact search (NP-hard), seconds of it."""
    attrs = [f"c{i}" for i in range(12)]
    values = [f"v{j}" for j in range(20)]
    g = np.random.default_rng(0)
    pd.DataFrame({a: g.choice(values, 300) for a in attrs}).to_csv(tmp_path / "h.csv", index=False)
    (tmp_path / "h.json").write_text(
        json.dumps(
            {"attributes": [{"name": a, "type": "categorical", "values": values} for a in attrs]}
        )
    )
    r = random.Random(1)

    def conj() -> str:
        parts = []
        for a in r.sample(attrs, 3):
            vals = [v for v in values if r.random() < 0.5] or [r.choice(values)]
            parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
        return " AND ".join(parts)

    def opened(**kw: object) -> Curator:
        return Curator.open(
            data=tmp_path / "h.csv", schema=tmp_path / "h.json", budget=PureDP(100.0),
            ledger=tmp_path / "h.db", **kw,
        )  # fmt: skip

    with opened() as filling:  # 110 charges of cost 1 (as tests/service/test_availability.py)
        for _ in range(11):
            with contextlib.suppress(BudgetExceeded):
                filling.release([conj() for _ in range(10)], [1.0] * 10)
    c = opened(**kw)
    c.hard = lambda: " OR ".join(f"({conj()})" for _ in range(4))  # type: ignore[attr-defined]
    return c


def test_the_deadline_is_enforced_in_the_worker_and_nothing_is_charged(tmp_path):
    c = hard_curator(
        tmp_path, request_time_limit=0.3, solver_time_limit=30.0, solver_processes=True
    )
    try:
        assert c._processes is not None and c._processes.start() == c._processes.workers
        before = c._ledger.head[0]
        outcomes = []
        for _ in range(4):
            try:
                c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
                outcomes.append("answered")
            except Undecided:
                outcomes.append("undecided")
            except BudgetExceeded:
                outcomes.append("refused")
        assert "undecided" in outcomes
        assert c._ledger.head[0] == before + outcomes.count("answered")
        # no worker is left busy with an abandoned search, none beyond the bound
        procs = c._processes
        assert procs is not None
        for _ in range(100):  # a pool thread past its request's deadline lets go at once
            with procs._cond:
                if not procs._busy:
                    break
            time.sleep(0.05)
        assert not procs._busy and procs.running <= procs.workers
    finally:
        c.close()


def _unread(fd: int) -> int:
    """Bytes in the pipe ``fd`` (either end) that its reader has not read yet."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def test_a_job_is_handed_over_whole_without_waiting_for_the_worker(tmp_path):
    """A job of a hundred charges (about 75 kB, more than a pipe's default 64 kB) is
    written whole into the pipe while its worker is stopped: a worker slow to run does
    not hold the request in the handover."""
    c = hard_curator(tmp_path, solver_processes=True)
    procs = c._processes
    assert procs is not None and procs.start() >= 1
    try:
        worker = procs._free[0]
        os.kill(worker.process.pid, signal.SIGSTOP)
        try:
            job = ([0] * 40_000, None, 1.0, None, math.inf, None)  # not a real job: 80 kB
            assert len(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)) > 65_536
            assert worker.give(job, time.monotonic() + 1.0)  # at once, the worker stopped
            assert _unread(worker.jobs) > 65_536
        finally:
            os.kill(worker.process.pid, signal.SIGCONT)
        assert worker.recv.poll(30)  # it read the job once it ran, and answered it
        ok, _ = worker.recv.recv()
        assert ok is False  # (an error: the job was not a real one)
    finally:
        c.close()


def test_a_late_worker_is_drained_and_serves_again(tmp_path):
    """A request that gives up on its worker (here: stopped by SIGSTOP past the
    deadline) is undecided at once, nothing charged; the worker is not killed: once it
    runs again it stops at its own look at the deadline, its late reply is dropped, and
    it serves the next request (no fresh interpreter to start)."""
    c = hard_curator(
        tmp_path, request_time_limit=1.0, solver_time_limit=30.0, solver_processes=True
    )
    procs = c._processes
    assert procs is not None and procs.start() == procs.workers
    try:
        pids = {w.process.pid for w in procs._free}
        before = c._ledger.head[0]
        got: list[object] = []

        def ask() -> None:
            try:
                c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
                got.append("answered")
            except Exception as err:  # what it raised is the assertion
                got.append(err)

        t = threading.Thread(target=ask)
        t.start()
        for _ in range(400):  # a worker took the search: stop them all (whichever it is)
            with procs._cond:
                if procs._busy:
                    break
            time.sleep(0.005)
        else:
            t.join()
            pytest.skip("the request was decided without a worker")
        with procs._cond:
            (busy,) = procs._busy
        for _ in range(1000):  # until the worker has read its whole job (a worker stopped
            if _unread(busy.jobs) == 0:  # before is killed if the job is half written)
                break
            time.sleep(0.005)
        time.sleep(0.1)  # stopped mid-search
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            t.join(10)
            assert not t.is_alive() and time.monotonic() - t0 < 3  # not held by them
            if got == ["answered"]:
                pytest.skip("the worker answered before it was stopped")
            assert len(got) == 1 and isinstance(got[0], Undecided), got
            assert c._ledger.head[0] == before
            for _ in range(100):  # the pool's thread lets go of its worker just after
                with procs._cond:
                    if not procs._busy:
                        break
                time.sleep(0.02)
            with procs._cond:
                drained = {w.process.pid for w in procs._draining}
            assert drained and drained <= pids
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        for _ in range(100):
            with procs._cond:
                if not procs._draining:
                    break
            time.sleep(0.05)
        with procs._cond:
            free = {w.process.pid for w in procs._free}
            assert not procs._draining and drained <= free <= pids  # back, not replaced
        assert all(w.process.poll() is None for w in procs._free)
    finally:
        c.close()


def test_a_worker_that_never_reads_cannot_hold_a_request(tmp_path):
    """Every worker stopped (SIGSTOP) before the request: its job is not read (a job
    larger than the pipe cannot even be written) and no reply comes. The request is
    undecided at its deadline, nothing charged, and the stopped worker is killed (at
    once, or once it has not replied within DRAIN seconds)."""
    c = hard_curator(
        tmp_path, request_time_limit=1.0, solver_time_limit=30.0, solver_processes=True
    )
    procs = c._processes
    assert procs is not None and procs.start() == procs.workers
    workers = list(procs._free)
    try:
        procs.local_cells = 0
        for w in workers:
            os.kill(w.process.pid, signal.SIGSTOP)
        before = c._ledger.head[0]
        t0 = time.monotonic()
        with pytest.raises(Undecided):
            c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
        assert time.monotonic() - t0 < 3
        assert c._ledger.head[0] == before
        for _ in range(100):
            with procs._cond:
                if not procs._draining and not procs._busy:
                    break
            time.sleep(0.05)
        used = [w for w in workers if w not in procs._free]
        assert used and all(w.process.poll() is not None for w in used)  # killed
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.process.pid, signal.SIGCONT)
        c.close()


def test_a_worker_killed_mid_search_is_undecided_and_replaced(tmp_path):
    c = hard_curator(tmp_path, request_time_limit=3.0, solver_time_limit=3.0, solver_processes=True)
    procs = c._processes
    assert procs is not None and procs.start() == procs.workers
    try:
        got: list[object] = []

        def ask() -> None:
            try:
                c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
                got.append("answered")
            except Exception as err:  # what it raised is the assertion
                got.append(err)

        before = c._ledger.head[0]
        t = threading.Thread(target=ask)
        t.start()
        pid = None
        for _ in range(400):  # wait for a worker to take the search
            with procs._cond:
                busy = [w.process.pid for w in procs._busy]
            if busy:
                pid = busy[0]
                break
            time.sleep(0.01)
        if pid is None:  # decided without the search: nothing to kill (not this test's case)
            t.join()
            pytest.skip("the request was decided without a worker")
        os.kill(pid, signal.SIGKILL)
        t.join(30)
        assert not t.is_alive()
        # decided, refused, or undecided (the worker's death, or a replacement's search
        # cut by the deadline): never a charge without an answer, never another error
        assert got == ["answered"] or isinstance(got[0], BudgetExceeded | Undecided), got
        if got != ["answered"]:
            assert c._ledger.head[0] == before
        with contextlib.suppress(BudgetExceeded, Undecided):
            c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
        assert procs.running <= procs.workers
    finally:
        c.close()


@pytest.fixture
def searches(monkeypatch):
    """Where the searches run: the names of the threads that searched in this process,
    and how many jobs went to a worker (the real search and handover, counted)."""
    import dpcurator.curator.solver_processes as sp

    seen: dict[str, list[str]] = {"here": [], "worker": []}
    search, solve = sp.max_loss, sp.SolverProcesses._solve

    def here(*args: object, **kw: object) -> object:
        seen["here"].append(threading.current_thread().name)
        return search(*args, **kw)

    def worker(self: object, *args: object) -> object:
        seen["worker"].append(threading.current_thread().name)
        return solve(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sp, "max_loss", here)
    monkeypatch.setattr(sp.SolverProcesses, "_solve", worker)
    return seen


@pytest.mark.parametrize("warm", [False, True])
def test_a_warmed_pool_never_searches_in_a_requests_thread(small, tmp_path, searches, warm):
    """A pool no one warmed runs its first checks in the request's thread while its
    first worker starts (a one-off command need not wait for it); a warmed one (as
    ``dpcurator serve``'s) waits for its worker instead, from the first check on."""
    data, schema = small
    c = Curator.open(
        data=data, schema=schema, budget=PureDP(6), ledger=tmp_path / "w.db",
        solver_processes=True,
    )  # fmt: skip
    try:
        assert c._processes is not None
        c._processes.local_cells = 0  # every search past the quick bound goes to the pool
        if warm:
            c.warm_solvers()
        r = random.Random(9)
        for _ in range(40):
            with contextlib.suppress(BudgetExceeded):
                c.count(boolean_request(r), epsilon=1.0)
        if warm:
            assert searches["here"] == [] and searches["worker"]
        else:
            assert searches["here"]  # the first, at least, while the worker started
    finally:
        c.close()


def test_while_every_worker_drains_a_check_waits_for_one(tmp_path, searches):
    """Each worker that takes one of a request's searches is stopped (SIGSTOP) once it
    has read its job: it overruns, and drains its late reply. The next request's search
    then waits for a new worker within its deadline, and never runs in the request's
    thread (there it would hold the interpreter lock other requests need for up to the
    solver's time limit)."""
    c = hard_curator(
        tmp_path, request_time_limit=1.5, solver_time_limit=30.0, solver_processes=True,
        solver_threads=1,
    )  # fmt: skip
    procs = c._processes
    assert procs is not None and procs.start() == procs.workers == 1
    procs.local_cells = 0
    for seen in searches.values():
        seen.clear()  # (the ledger's filling, by a pool no one warmed)
    stopped: list[int] = []
    done = threading.Event()

    def stop_each_busy_worker() -> None:
        while not done.is_set():
            with procs._cond:
                busy = [w for w in procs._busy if w.process.pid not in stopped]
            for w in busy:
                if _unread(w.jobs) == 0:  # its job read whole: stopped mid-search
                    os.kill(w.process.pid, signal.SIGSTOP)
                    stopped.append(w.process.pid)
            time.sleep(0.002)

    watcher = threading.Thread(target=stop_each_busy_worker)
    watcher.start()
    try:
        with contextlib.suppress(BudgetExceeded, Undecided):
            c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
        done.set()
        watcher.join()
        assert searches["here"] == []  # (a search after its worker was stopped, too)
        with procs._cond:
            if not stopped or procs._free or procs._busy:
                pytest.skip("the request was decided before its worker was stopped")
            assert procs._draining
        with contextlib.suppress(BudgetExceeded, Undecided):
            c.count(c.hard(), epsilon=3.0)  # type: ignore[attr-defined]
        assert searches["here"] == []
        assert len(searches["worker"]) >= 2
    finally:
        done.set()
        watcher.join()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        c.close()


def test_close_kills_every_worker(small, tmp_path):
    _, c = decisions(small, tmp_path, "p.db", True)
    procs = c._processes
    assert procs is not None and procs._free
    workers = [w.process for w in procs._free]
    c.close()
    for p in workers:
        p.wait(5)
        assert p.poll() is not None


def stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (state, ppid, ...)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def ended(pid: int, within: float) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within`` seconds."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        try:
            if stat(pid)[0] in ("Z", "X"):
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.02)
    return False


def test_workers_are_forks_of_one_single_threaded_template(small, tmp_path):
    """Each worker's parent is the template, a fresh interpreter started by the curator
    (not a fork of it); the template and every worker run one thread (a fork copies a
    whole process, and a worker takes one core)."""
    _, c = decisions(small, tmp_path, "p.db", True)
    try:
        procs = c._processes
        assert procs is not None and len(procs._free) == procs.workers
        template = procs._template
        assert template is not None
        assert int(stat(template.process.pid)[1]) == os.getpid()
        assert "solver_worker" in Path(f"/proc/{template.process.pid}/cmdline").read_text()
        pids = {w.process.pid for w in procs._free}
        assert len(pids) == procs.workers
        for pid in [template.process.pid, *pids]:
            assert len(os.listdir(f"/proc/{pid}/task")) == 1
        assert {int(stat(pid)[1]) for pid in pids} == {template.process.pid}
    finally:
        c.close()


def same_as_threads(c: Curator, t: Curator, n: int = 30) -> None:
    """``n`` boolean counts decided alike by ``c`` and ``t`` (none undecided)."""
    r = random.Random(3)
    for _ in range(n):
        q = boolean_request(r)
        outcomes = []
        for cur in (c, t):
            try:
                cur.count(q, epsilon=1.0)
                outcomes.append(True)
            except BudgetExceeded:
                outcomes.append(False)
        assert outcomes[0] == outcomes[1]


def pair(small, tmp_path, **kw) -> tuple[Curator, Curator]:
    """A curator with workers (every search past the quick bound in a worker) and one
    deciding in threads, on ledgers of their own."""
    data, schema = small
    c = Curator.open(
        data=data, schema=schema, budget=PureDP(6), ledger=tmp_path / "w.db",
        solver_processes=True, **kw,
    )  # fmt: skip
    assert c._processes is not None
    c._processes.local_cells = 0
    t = Curator.open(
        data=data, schema=schema, budget=PureDP(6), ledger=tmp_path / "t.db",
        solver_processes=False,
    )  # fmt: skip
    return c, t


def test_a_dead_template_is_replaced_and_its_workers_serve_on(small, tmp_path):
    """With the template and every idle worker killed, the next checks get workers from
    a new template (a dead idle worker is never handed a job): the same decisions as
    in threads, none undecided."""
    c, t = pair(small, tmp_path)
    try:
        procs = c._processes
        assert procs is not None
        assert procs.start() == procs.workers
        first = procs._template
        assert first is not None
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(5)
        dead = {w.process.pid for w in procs._free}
        for pid in dead:
            os.kill(pid, signal.SIGKILL)
        assert all(ended(pid, 5) for pid in dead)
        same_as_threads(c, t)
        assert procs._template is not None and procs._template is not first
        assert procs._template.alive()
        assert procs._free and not dead & {w.process.pid for w in procs._free}
    finally:
        c.close()
        t.close()


def test_workers_serve_a_process_whose_descriptors_pass_1024(small, tmp_path):
    """A busy server holds more than 1024 descriptors (``select`` cannot watch those): its
    workers' pipes, sockets and pidfds above it still serve, with the same decisions."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        got, c = decisions(small, tmp_path, "p.db", True)
        try:
            procs = c._processes
            assert procs is not None and procs._template is not None
            assert min(w.jobs for w in procs._free) > 1024
            want, t = decisions(small, tmp_path, "t.db", False)
            t.close()
            assert got == want and True in got and False in got
        finally:
            c.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_stopped_template_is_replaced_within_the_fork_timeout(small, tmp_path, monkeypatch):
    """A template that does not fork (SIGSTOP) is killed after FORK_TIMEOUT and a new one
    forks the worker: the request is decided, within its deadline."""
    from dpcurator.curator import solver_template

    monkeypatch.setattr(solver_template, "FORK_TIMEOUT", 0.5)
    c, t = pair(small, tmp_path, request_time_limit=20.0)
    procs = c._processes
    assert procs is not None
    stopped = None
    try:
        assert procs.start() == procs.workers
        stopped = procs._template
        assert stopped is not None
        os.kill(stopped.process.pid, signal.SIGSTOP)
        for w in list(procs._free):
            os.kill(w.process.pid, signal.SIGKILL)
            assert ended(w.process.pid, 5)
        same_as_threads(c, t)
        assert procs._template is not stopped and procs._template is not None
        assert stopped.process.wait(5) is not None  # killed
        assert procs._free
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped.process.pid, signal.SIGCONT)
        c.close()
        t.close()


def test_a_template_that_cannot_start_is_tried_again_later(small, tmp_path, monkeypatch, searches):
    """A template that exits at once: the checks search in their threads (as without
    workers), and once RETRY_START has passed a worker is tried again and serves."""
    import dpcurator.curator.solver_processes as sp
    from dpcurator.curator import solver_template

    good = solver_template._command
    monkeypatch.setattr(solver_template, "_command", lambda mode: ["/bin/false"])
    monkeypatch.setattr(sp, "RETRY_START", 1.0)
    c, t = pair(small, tmp_path)
    procs = c._processes
    assert procs is not None
    try:
        assert procs.start(20) == 0
        same_as_threads(c, t, 10)
        assert searches["here"] and not searches["worker"]
        monkeypatch.setattr(solver_template, "_command", good)
        time.sleep(1.1)
        assert procs.start(20) == procs.workers
        searches["here"].clear()
        same_as_threads(c, t, 10)
        assert searches["worker"] and not searches["here"]
    finally:
        c.close()
        t.close()


def test_where_templates_cannot_be_used_each_worker_is_spawned(small, tmp_path):
    """Without pidfds (not Linux 5.3+, or a sandbox): each worker a fresh interpreter and
    a child of the curator's process, the same decisions."""
    c, t = pair(small, tmp_path)
    procs = c._processes
    assert procs is not None
    procs._forking = False
    try:
        assert procs.start() == procs.workers
        assert procs._template is None
        for w in procs._free:
            assert isinstance(w.process, subprocess.Popen)
            assert int(stat(w.process.pid)[1]) == os.getpid()
            assert len(os.listdir(f"/proc/{w.process.pid}/task")) == 1
        same_as_threads(c, t)
        workers = [w.process for w in procs._free]
    finally:
        c.close()
        t.close()
    for p in workers:
        assert p.wait(5) is not None


@pytest.mark.parametrize("forking", [True, False])
def test_a_pool_dropped_without_close_leaves_no_worker(forking):
    """A pool (a curator) dropped without close(): once collected, its workers read the
    end of their jobs' pipes and the template that of its socket, and all end."""
    import gc

    from dpcurator.curator.solver_processes import SolverProcesses

    procs = SolverProcesses(2)
    procs._forking = forking
    assert procs.start() == 2
    pids = [w.process.pid for w in procs._free]
    if forking:
        assert procs._template is not None
        pids.append(procs._template.process.pid)
    del procs
    gc.collect()
    assert all(ended(pid, 10) for pid in pids)


@pytest.mark.parametrize("mode", ["template", "worker"])
def test_a_server_gone_while_its_template_starts_leaves_it_quiet(mode):
    """The server stops while its template (or a spawned worker) imports the solver: it
    ends at the closed socket or pipe, status 0, nothing on stderr (no traceback in
    the server's log)."""
    import socket
    import subprocess

    from dpcurator.curator import solver_template

    if mode == "template":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        p = subprocess.Popen(
            solver_template._command(mode), stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        theirs.close()
        ours.close()
    else:
        p = subprocess.Popen(
            solver_template._command(mode), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        assert p.stdin is not None and p.stdout is not None
        p.stdin.close()
        p.stdout.close()
        p.stdin = p.stdout = None  # (closed: communicate() reads stderr only)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0 and err == b"", err.decode()[-2000:]


REAPER = """
import ctypes, json, os, signal, sys, time
from dpcurator import Curator
from dpcurator.privacy import PureDP

assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
c = Curator.open(data=sys.argv[1], schema=sys.argv[2], budget=PureDP(6), ledger=None)
p = c._processes
p.start(60)
workers = [w.process.pid for w in p._free]
os.kill(p._template.process.pid, signal.SIGKILL)
p._template.process.wait(5)
time.sleep(0.2)
parents = {}
for pid in workers:
    text = open(f"/proc/{pid}/stat").read()
    parents[pid] = int(text[text.rindex(")") + 2 :].split()[1])
c.close()
states = {}
for pid in workers:
    try:
        text = open(f"/proc/{pid}/stat").read()
        states[pid] = text[text.rindex(")") + 2 :].split()[0]
    except FileNotFoundError:
        states[pid] = "gone"
print(json.dumps({"me": os.getpid(), "parents": list(parents.values()), "states": list(states.values())}))
"""


def test_orphaned_workers_are_reaped_by_a_curator_that_reaps_orphans(small, tmp_path):
    """In a container whose PID 1 is the server (or under a subreaper), the workers of a
    template that died become the server's children: closing reaps them (no zombies)."""
    import subprocess
    import sys

    data, schema = small
    out = subprocess.run(
        [sys.executable, "-c", REAPER, str(data), str(schema)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(got["parents"]) == {got["me"]}  # adopted by the curator's process
    assert set(got["states"]) == {"gone"}, got


KILLED = """
import json, sys, time
from dpcurator import Curator
from dpcurator.privacy import PureDP

c = Curator.open(data=sys.argv[1], schema=sys.argv[2], budget=PureDP(6), ledger=None)
p = c._processes
p.start(60)
print(json.dumps([p._template.process.pid, *[w.process.pid for w in p._free]]), flush=True)
time.sleep(600)
"""


def test_a_curator_killed_leaves_no_template_and_no_worker(small, tmp_path):
    """SIGKILL to the process that holds the curator: the template reads the end of its
    socket, each worker the end of its jobs' pipe, and all end by themselves."""
    import subprocess
    import sys

    data, schema = small
    p = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(data), str(schema)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None
        pids = json.loads(p.stdout.readline())
        assert len(pids) == 5 and all(not ended(pid, 0) for pid in pids)
    finally:
        p.kill()
        p.wait(10)
    assert all(ended(pid, 10) for pid in pids), [stat(pid) for pid in pids if not ended(pid, 0)]


def test_workers_search_at_a_lower_priority_than_the_server(small, tmp_path):
    """A worker's niceness (the 19th field of /proc/PID/stat) is NICENESS above the
    server's: the kernel gives the server's threads a core first."""

    def niceness(pid: int) -> int:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[16])

    _, c = decisions(small, tmp_path, "p.db", True)
    try:
        procs = c._processes
        assert procs is not None and procs._free
        for w in procs._free:
            assert niceness(w.process.pid) == min(19, niceness(os.getpid()) + NICENESS)
        assert NICENESS == 10
    finally:
        c.close()


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_solver_processes_must_be_true_or_false(small, tmp_path, bad):
    data, schema = small
    with pytest.raises(InvalidParameter, match="solver_processes must be true or false"):
        Curator.open(data=data, schema=schema, budget=PureDP(1), solver_processes=bad)


SCRIPT = """
import json, os, sys
from dpcurator import Curator
from dpcurator.privacy import PureDP

# top-level code with no main guard: it must run once, in this process only
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
c = Curator.open(data=sys.argv[2], schema=sys.argv[3], budget=PureDP(6), ledger=None)
p = c._processes
p.local_cells = 0
ready = p.start(60)
c.count("(c0 IN ('p', 'q') AND c1 = 'r') OR (c2 = 's' AND c3 IN ('p', 'q'))", epsilon=1.0)
print(json.dumps({"ready": ready, "pids": [w.process.pid for w in p._free]}))
c.close()
"""


@pytest.mark.parametrize("how", ["stdin", "file"])
def test_a_script_without_a_main_guard_gets_workers_and_runs_once(small, tmp_path, how):
    """The workers' template is a fresh interpreter: a script read from stdin starts
    them, and a script's top-level code (no ``if __name__ == "__main__"``) runs in its
    own process only. :mod:`multiprocessing`'s children would import the caller's
    ``__main__`` again."""
    import subprocess
    import sys

    data, schema = small
    log = tmp_path / "ran.txt"
    args = [str(log), str(data), str(schema)]
    if how == "stdin":
        cmd, stdin = [sys.executable, "-", *args], SCRIPT
    else:
        script = tmp_path / "unguarded.py"
        script.write_text(SCRIPT)
        cmd, stdin = [sys.executable, str(script), *args], None
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ready"] == 4 and len(out["pids"]) == 4
    assert len(log.read_text().split()) == 1  # the top-level code ran once
    for pid in out["pids"]:  # closed: every worker is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
