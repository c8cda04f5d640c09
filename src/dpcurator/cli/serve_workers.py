"""``dpcurator serve --workers N``: N server processes answering on one port.

Why. One server process runs Python one thread at a time (the interpreter lock), so on a
machine with several cores it answers at most what one core can: its event loop, the
requests' threads and the group commit all take turns. N processes on the same ledger
each have their own interpreter; together they use N cores. Measured on 2 cores with
16 clients sending varied counts (benchmarks/throughput_mix.py), see docs/service.md.

How. This process (the *supervisor*) binds the listening socket, then starts N fresh
interpreters that each run ``dpcurator serve`` with the same arguments on that socket
(:data:`WORKER_FLAG`), the first alone (it creates or upgrades the ledger, and a start
error is then reported once, in its own words), the others once it listens. The kernel
hands each new connection to one of them. Every worker opens the same ledger: a
check-and-charge is serialised across them by the ledger's write lock (SQLite's, or
PostgreSQL's advisory lock), exactly as for replicas, so together they spend one budget
and each analyst's one quota as one server would. Their rate limit is shared
(``rate_limit_scope = "auto"`` becomes ``shared``: one bucket per analyst, in a file
beside a ledger file or in the ledger's database).

The supervisor serves nothing and holds no data. It prints the first worker's start
lines, then ``listening on URL`` once every worker listens; a worker that ends
unexpectedly is started again (after a pause if it ended within :data:`SETTLE` seconds
of its start, so that a worker that cannot start does not spin). SIGINT or SIGTERM stops
every worker gracefully (each finishes its requests in flight, then closes the ledger);
the workers are in a session of their own, so that Ctrl-C at a terminal reaches them
once, through the supervisor. A worker whose supervisor dies (even by SIGKILL) gets
SIGTERM from the kernel (Linux's parent-death signal) and stops.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from dpcurator.errors import InvalidParameter

#: The hidden flag a worker is started with: ``FD:PARENT:QUIET``: the listening socket
#: it inherits, the supervisor's process id, and 1 when its start lines are not wanted.
WORKER_FLAG = "--worker"
#: The most workers (more than the cores only adds contention).
MAX_WORKERS = 64
#: Seconds a worker must have run for its end to count as unexpected rather than as a
#: failure to start, which pauses the next start of its slot (1, 2, 4, ... 30 s).
SETTLE = 10.0
#: Seconds the workers have to stop gracefully before they are killed.
STOP_TIMEOUT = 30.0

#: What a worker's interpreter runs: the supervisor's import path, then the CLI.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv.pop(1)); "
    "from dpcurator.cli import main; sys.exit(main(sys.argv[1:]))"
)
_PR_SET_PDEATHSIG = 1


def workers_of(flag: object, server: dict[str, object]) -> int:
    """How many workers: ``--workers``, else ``[server] workers``, else 1."""
    v = flag if flag is not None else server.get("workers", 1)
    where = "--workers" if flag is not None else "--config: [server] workers"
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_WORKERS:
        raise InvalidParameter(f"{where} must be an integer from 1 to {MAX_WORKERS}, got {v!r}")
    return v


def parse_worker(value: str) -> tuple[socket.socket, int, bool]:
    """A worker's inherited socket, its supervisor's pid, and whether it is quiet (see
    :data:`WORKER_FLAG`); refused unless it names a listening TCP socket."""
    parts = value.split(":")
    ok = (
        len(parts) == 3
        and all(p.isdigit() and p.isascii() and len(p) <= 9 for p in parts)
        and parts[2] in ("0", "1")
    )
    sock = None
    if ok:
        try:
            sock = socket.socket(fileno=int(parts[0]))
            ok = sock.type == socket.SOCK_STREAM and bool(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            )
        except (OSError, OverflowError, ValueError):
            ok = False
    if not ok or sock is None:
        raise InvalidParameter(f"{WORKER_FLAG} is for the workers dpcurator serve --workers starts")
    return sock, int(parts[1]), parts[2] == "1"


def die_with(parent: int) -> None:
    """Have the kernel send this worker SIGTERM when its supervisor ends; end now if it
    already has (Linux; elsewhere a worker outlives a supervisor killed by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        raise SystemExit(0)


class _Worker:
    """One worker process, its slot, and a thread reading its standard output."""

    def __init__(self, argv: Sequence[str], sock: socket.socket, slot: int, relay: bool) -> None:
        self.slot = slot
        self.started = time.monotonic()
        self.ready = threading.Event()
        quiet = "0" if relay else "1"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path), *argv,
             f"{WORKER_FLAG}={sock.fileno()}:{os.getpid()}:{quiet}"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            pass_fds=(sock.fileno(),),
            start_new_session=True,
            text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, args=(relay,), daemon=True)
        self._reader.start()

    def _read(self, relay: bool) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("listening on "):
                self.ready.set()
            elif relay:
                try:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                except (OSError, ValueError):  # no one reads our output any more
                    relay = False

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)

    def join(self, until: float) -> None:
        try:
            self.process.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)


def _say(text: str) -> None:
    sys.stderr.write(f"dpcurator serve: {text}\n")
    sys.stderr.flush()


def _ended(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"status {code}"


class _Stop:
    """Whether a signal asked to stop: a plain flag the loops poll (a signal handler
    must not take a lock the thread it interrupted may hold, a
    :class:`threading.Event`'s for one)."""

    def __init__(self) -> None:
        self.asked = False

    def set(self, *_: object) -> None:
        self.asked = True

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless asked to stop already; whether asked."""
        if not self.asked:
            time.sleep(seconds)
        return self.asked


def std_streams_open() -> None:
    """Open /dev/null on any of the descriptors 0-2 that is closed, so that the listening
    socket made next cannot take one of their numbers (a worker's stdin, stdout and
    stderr are set up on them, which would replace it)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one


def pinned(config: str | None, directory: str) -> list[str]:
    """The flags that give every worker, the ones started later too, the configuration
    as it is now: a copy of the file in ``directory`` (the supervisor's, private), so
    that an edit made while the workers run (another ledger, another rate scope) cannot
    split them; it applies at the next start of the command."""
    if config is None:
        return []
    copy = os.path.join(directory, "config.toml")
    with open(config, "rb") as f:
        data = f.read()
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return ["--config", copy]


def supervise(argv: Sequence[str], sock: socket.socket, workers: int, url: str) -> int:
    """Run ``workers`` workers of ``dpcurator serve ARGV`` on ``sock`` until SIGINT or
    SIGTERM (see the module doc); the exit status. ``argv`` must pin what every worker
    uses (:func:`pinned`)."""
    stop = _Stop()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # (signals reach only it)
        for s in (signal.SIGINT, signal.SIGTERM):
            previous[s] = signal.signal(s, stop.set)
    running: list[_Worker] = []
    try:
        first = _Worker(argv, sock, 0, relay=True)
        running.append(first)
        if not _started([first], stop):
            return _start_failed(running, stop)
        running += [_Worker(argv, sock, slot, relay=False) for slot in range(1, workers)]
        if not _started(running[1:], stop):
            return _start_failed(running, stop)
        pids = ", ".join(str(w.process.pid) for w in running)
        print(f"workers: {workers} processes on one port and one ledger (pids {pids})")
        print(f"listening on {url}", flush=True)
        _keep(running, argv, sock, stop)
        return 0
    finally:
        until = time.monotonic() + STOP_TIMEOUT
        for w in running:
            w.stop()
        for w in running:
            w.join(until)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _started(starting: list[_Worker], stop: _Stop) -> bool:
    """Whether every worker of ``starting`` listens (False: one ended, or a signal came)."""
    while not stop.wait(0.05):
        if all(w.ready.is_set() for w in starting):
            return True
        if any(w.process.poll() is not None and not w.ready.is_set() for w in starting):
            return False
    return False


def _start_failed(running: list[_Worker], stop: _Stop) -> int:
    """The status of a start that did not complete: the failed worker's (it said why on
    standard error; an end by a signal is said here), or 0 after a signal."""
    if stop.asked:
        return 0
    for w in running:
        code = w.process.poll()
        if code is not None and not w.ready.is_set():
            if code < 0:
                _say(
                    f"error: worker {w.slot} (pid {w.process.pid}) ended ({_ended(code)}) "
                    "before it listened"
                )
            return code if code > 0 else 1
    return 1


def _keep(running: list[_Worker], argv: Sequence[str], sock: socket.socket, stop: _Stop) -> None:
    """Start again each worker that ends, until a signal asks every worker to stop."""
    pause: dict[int, float] = {}
    due: dict[int, float] = {}  # slot -> when its next worker starts
    while not stop.wait(0.2):
        now = time.monotonic()
        for w in list(running):
            code = w.process.poll()
            if code is None:
                continue
            running.remove(w)
            quick = now - w.started < SETTLE
            pause[w.slot] = min(30.0, 2 * pause.get(w.slot, 0.5)) if quick else 0.0
            due[w.slot] = now + pause[w.slot]
            _say(
                f"worker {w.slot} (pid {w.process.pid}) ended ({_ended(code)}); starting "
                f"another{f' in {pause[w.slot]:g} s' if pause[w.slot] else ''}"
            )
        for slot, at in list(due.items()):
            if at <= now:
                del due[slot]
                running.append(_Worker(argv, sock, slot, relay=False))
