"""A throw-away PostgreSQL server for the tests and benchmarks (Debian's ``postgresql``
binaries), and the command CI uses to start and stop one:

    python tests/postgres_server.py start DIR   # prints the URL; the server runs on
    python tests/postgres_server.py stop DIR    # ... until this

The cluster is made with ``initdb`` in DIR (``trust`` authentication, superuser ``dpc``)
and listens on 127.0.0.1 at a free port and on a socket in DIR. PostgreSQL refuses to run
as root: under root the server runs as the user named by ``DPCURATOR_PG_USER``, else
``dpcpg`` or ``postgres``, whichever exists (CI creates ``dpcpg``), and DIR is given to it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: The environment variable that gives the tests a server's URL (CI sets it).
URL_VARIABLE = "DPCURATOR_TEST_POSTGRES_URL"


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` (``PG_BIN``, then PATH, then the newest of
    Debian's /usr/lib/postgresql/*/bin), or None."""
    for where in [os.environ.get("PG_BIN")]:
        if where and (Path(where) / "pg_ctl").exists():
            return Path(where)
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(versions[-1]).parent if versions else None


def server_user() -> str | None:
    """Who runs the server: None for this user, or a non-root user when we are root."""
    if os.geteuid() != 0:
        return None
    for name in (os.environ.get("DPCURATOR_PG_USER"), "dpcpg", "postgres"):
        if name:
            try:
                pwd.getpwnam(name)
            except KeyError:
                continue
            return name
    raise RuntimeError("PostgreSQL cannot run as root and there is no user dpcpg or postgres")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(user: str | None, *argv: str) -> None:
    cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/")
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stdout}{done.stderr}")


@dataclass(frozen=True)
class Cluster:
    url: str
    directory: Path

    def stop(self) -> None:
        stop(self.directory)


def start(directory: Path, *, durable: bool = False) -> Cluster:
    """Make and start a cluster in ``directory`` (which must be empty or absent).
    ``durable=False`` turns fsync off (a faster server for tests; a server that is never
    killed loses nothing to it); benchmarks keep it on."""
    bindir = binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL binaries (install Debian's postgresql)")
    user = server_user()
    directory.mkdir(parents=True, exist_ok=True)
    if user:
        info = pwd.getpwnam(user)
        os.chown(directory, info.pw_uid, info.pw_gid)
    data = directory / "data"
    _run(
        user,
        str(bindir / "initdb"),
        "-D",
        str(data),
        "-U",
        "dpc",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
    )
    port = _free_port()
    options = [
        "-c listen_addresses=127.0.0.1",
        f"-p {port}",
        f"-c unix_socket_directories={directory}",
        "-c max_connections=300",
    ]
    if not durable:
        options += ["-c fsync=off", "-c full_page_writes=off"]
    _run(
        user,
        str(bindir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(directory / "server.log"),
        "-w",
        "-t",
        "60",
        "-o",
        " ".join(options),
        "start",
    )
    url = f"postgresql://dpc@127.0.0.1:{port}/postgres"
    (directory / "url").write_text(url)
    return Cluster(url, directory)


def stop(directory: Path) -> None:
    """Stop the cluster in ``directory`` (at once: nothing in it is kept)."""
    bindir = binaries()
    data = directory / "data"
    if bindir is None or not (data / "postmaster.pid").exists():
        return
    owner = pwd.getpwuid(directory.stat().st_uid).pw_name if os.geteuid() == 0 else None
    _run(owner, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")


def temporary(*, durable: bool = False) -> Cluster:
    """A cluster in a new folder of the system's temporary directory (which the server's
    user can reach, unlike pytest's per-user folders)."""
    return start(Path(tempfile.mkdtemp(prefix="dpcurator-pg-")), durable=durable)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        sys.stderr.write("usage: postgres_server.py start|stop DIR\n")
        return 2
    if argv[0] == "start":
        print(start(Path(argv[1])).url)
    else:
        stop(Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
