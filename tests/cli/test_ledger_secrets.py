"""No secret of a ledger URL is ever printed: every command that takes a ledger, with a
distinctive password in the URL's user information, in ``?password=``, in
``?sslpassword=``, percent-encoded, with a stray ``%``, wrong, or for a server that is
not there; ``serve`` (a real process: its start, its hint, its JSON, its dashboard and
its log, also when the ledger's password stops working while it serves), through
``--ledger`` and through ``[ledger] url``; and the Python API's LedgerError messages.
Each failure is one line. Both forms of naming a ledger (``LEDGER``, ``--ledger``)
work everywhere.

A PostgreSQL server of this module's own, which asks the user ``curator`` for its
password (scram-sha-256, over TCP and its socket): the tests' shared server trusts
everyone and so would accept any password.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.curator.ledger import Ledger, backup_ledger, copy_ledger
from dpcurator.curator.stores import location_of
from dpcurator.errors import LedgerError
from dpcurator.privacy import PureDP

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")
import postgres_server  # noqa: E402  (tests/, on the path by conftest)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
SAMPLE = ROOT / "examples" / "data" / "adult-sample.csv"
DATA = ["--data", SAMPLE, "--schema", SCHEMA, "--separator", ",", "--header"]

USER = "curator"
#: The ledger's password: every character a URL makes special, and two marks that any
#: leak of any part of it, in any encoding, would show.
SECRET = "Zq7Kw %&/@?:#+\"'\\é=Jx4Rt"
ENCODED = quote(SECRET, safe="")
MARKS = ("Zq7Kw", "Jx4Rt")


def clean(*texts: str) -> None:
    """No trace of any password of these tests in ``texts``."""
    for text in texts:
        for mark in (*MARKS, SECRET, ENCODED, quote(SECRET)):
            assert mark not in text, text


def one_line(err: str, command: str) -> None:
    assert err.count("\n") == 1 and err.startswith(f"dpcurator {command}: error: "), err
    assert "Traceback" not in err


@dataclass
class Server:
    port: int
    directory: Path
    admin: str  # a superuser's URL (trusted, no password)

    def tcp(self, schema: str, *, userinfo: str = f":{ENCODED}", query: str = "") -> str:
        return (
            f"postgresql://{USER}{userinfo}@127.0.0.1:{self.port}/postgres?{query}schema={schema}"
        )

    def set_password(self, password: str) -> None:
        with psycopg.connect(self.admin, autocommit=True) as con:
            con.execute(
                psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    psycopg.sql.Identifier(USER), psycopg.sql.Literal(password)
                )
            )
            con.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (USER,)
            )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    if postgres_server.binaries() is None:
        pytest.skip("no PostgreSQL binaries to start a server that asks for passwords")
    directory = Path(tempfile.mkdtemp(prefix="dpcurator-pg-secrets-"))
    try:
        cluster = postgres_server.start(directory)
    except RuntimeError as err:
        shutil.rmtree(directory, ignore_errors=True)
        pytest.skip(f"cannot start a PostgreSQL server ({err})")
    try:
        hba = directory / "data" / "pg_hba.conf"
        hba.write_text(
            f"local all {USER} scram-sha-256\nhost all {USER} 127.0.0.1/32 scram-sha-256\n"
            + hba.read_text()
        )
        with psycopg.connect(cluster.url, autocommit=True) as con:
            con.execute(f"CREATE ROLE {USER} LOGIN")
            con.execute(f"GRANT CREATE ON DATABASE postgres TO {USER}")
            con.execute("SELECT pg_reload_conf()")
        port = int(cluster.url.rsplit(":", 1)[1].split("/")[0])
        srv = Server(port, directory, cluster.url)
        srv.set_password(SECRET)
        wrong = f"postgresql://{USER}:nothing@127.0.0.1:{port}/postgres"
        for _ in range(100):  # the reload is asynchronous
            try:
                psycopg.connect(wrong).close()
            except psycopg.OperationalError:
                break
            time.sleep(0.1)
        psycopg.connect(srv.tcp("x").split("?")[0]).close()
        yield srv
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


_schemas = iter(range(10**6))


def fresh() -> str:
    return f"s{next(_schemas)}"


def good_urls(srv: Server) -> dict[str, str]:
    """A working URL of a new ledger for each place a password can be."""
    sock = quote(str(srv.directory), safe="")
    return {
        "userinfo": srv.tcp(fresh()),
        "password=": srv.tcp(fresh(), userinfo="", query=f"password={ENCODED}&"),
        "encoded-name": srv.tcp(fresh(), userinfo="", query=f"pass%77ord={ENCODED}&"),
        "sslpassword=": srv.tcp(fresh(), query=f"sslmode=disable&sslpassword={ENCODED}&"),
        "socket": f"postgresql:///postgres?host={sock}&port={srv.port}&user={USER}"
        f"&password={ENCODED}&schema={fresh()}",
        "postgres://": srv.tcp(fresh()).replace("postgresql://", "postgres://", 1),
    }


def bad_urls(srv: Server, free_port: int) -> dict[str, str]:
    """URLs carrying the marks that cannot be used, for every reason."""
    wrong = quote("Zq7Kw-not-it-Jx4Rt", safe="")
    return {
        "wrong-password": srv.tcp(fresh(), userinfo=f":{wrong}"),
        "wrong-password=": srv.tcp(fresh(), userinfo="", query=f"password={wrong}&"),
        "stray-%": srv.tcp(fresh(), userinfo=":Zq7Kw%zz%Jx4Rt"),
        "stray-%-sslpassword=": srv.tcp(fresh(), query="sslpassword=Zq7Kw%Jx4Rt&"),
        "unencoded-/": srv.tcp(fresh(), userinfo=":Zq7Kw/Jx4Rt"),
        "unencoded-&": srv.tcp(fresh(), userinfo="", query="password=Zq7Kw&Jx4Rt&"),
        "no-server": f"postgresql://{USER}:{ENCODED}@127.0.0.1:{free_port}/postgres"
        "?connect_timeout=5",
        "no-ledger": srv.tcp(fresh()),  # the right password, an empty schema
    }


@pytest.fixture(scope="module")
def free_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nothing listens on: connections are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield int(s.getsockname()[1])
    s.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """An SQLite ledger to copy into PostgreSQL."""
    path = tmp_path_factory.mktemp("source") / "l.db"
    with Curator.open(
        data=SAMPLE, schema=SCHEMA, budget=PureDP(1.0), ledger=path, separator=",", header=True
    ) as c:
        c.count("age < 30", epsilon=0.1)
    return path


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("workload") / "w.txt"
    path.write_text("age < 30\nsex = 'Female'\n")
    return path


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def answer(workload: Path, url: str) -> list[object]:
    return ["answer", *DATA, "--workload", workload, "--epsilon", "1", "--ledger", url]


# --- every command, with a URL that works --------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["userinfo", "password=", "encoded-name", "sslpassword=", "socket", "postgres://"]
)
def test_every_command_with_a_password_in_the_url(kind, server, source, workload, tmp_path, capsys):
    url, other = good_urls(server)[kind], good_urls(server)[kind]
    shown = location_of(url)
    clean(shown)
    commands: list[list[object]] = [
        answer(workload, url),
        ["ledger", "show", url],
        ["ledger", "show", "--ledger", url, "--json"],
        ["ledger", "show", url, "--ledger", url, "--query", "age < 50"],
        ["ledger", "history", url],
        ["ledger", "history", "--ledger", url, "--json"],
        ["ledger", "analysts", url],
        ["analysts", "add", "alice", "--ledger", url],
        ["analysts", "add", "bob", url, "--quota", "0.5", "--json"],
        ["analysts", "list", url],
        ["analysts", "list", "--ledger", url, "--json"],
        ["analysts", "revoke", "alice", url],
        ["analysts", "revoke", "bob", "--ledger", url],
        ["ledger", "backup", url, tmp_path / "b.db"],
        ["ledger", "backup", "--ledger", url, tmp_path / "b.db", "--force"],
        ["ledger", "copy", "--ledger", url, tmp_path / "c.db"],
        ["ledger", "copy", source, other],
        ["ledger", "copy", tmp_path / "c.db", url, "--force"],
        ["ledger", "show", other, "--json"],
    ]
    for argv in commands:
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        clean(out, err)
    code, out, _ = run(capsys, "ledger", "show", url)
    assert out.startswith(f"ledger:     {shown} (verified: "), out
    code, out, _ = run(capsys, "ledger", "show", other, "--json")
    assert json.loads(out)["ledger"] == location_of(other)


# --- every command, with a URL that does not work -------------------------------------------


def failing_commands(url: str, source: Path, workload: Path, tmp: Path) -> list[list[object]]:
    return [
        answer(workload, url),
        ["ledger", "show", url],
        ["ledger", "show", "--ledger", url, "--json"],
        ["ledger", "history", url],
        ["ledger", "analysts", "--ledger", url],
        ["ledger", "backup", url, tmp / "b.db"],
        ["ledger", "copy", "--ledger", url, tmp / "c.db"],
        ["ledger", "copy", source, url],
        ["analysts", "add", "alice", "--ledger", url],
        ["analysts", "list", url],
        ["analysts", "revoke", "alice", url],
    ]


BAD = [
    "wrong-password",
    "wrong-password=",
    "stray-%",
    "stray-%-sslpassword=",
    "unencoded-/",
    "unencoded-&",
    "no-server",
    "no-ledger",
]


@pytest.mark.parametrize("kind", BAD)
def test_every_command_fails_in_one_line_without_the_password(
    kind, server, free_port, source, workload, tmp_path, capsys
):
    url = bad_urls(server, free_port)[kind]
    for argv in failing_commands(url, source, workload, tmp_path):
        if kind == "no-ledger" and (argv[0] == "answer" or argv[2] == source):
            continue  # these create a ledger there
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", (argv, out, err)
        one_line(err, str(argv[0]))
        clean(err)
    assert not (tmp_path / "b.db").exists() and not (tmp_path / "c.db").exists()


def test_failures_say_what_failed(server, free_port, capsys):
    bad = bad_urls(server, free_port)
    said = {}
    for kind in ("wrong-password", "no-server", "stray-%", "unencoded-/", "no-ledger"):
        _, _, err = run(capsys, "ledger", "show", bad[kind])
        said[kind] = err
    shown = f"postgresql://{USER}@127.0.0.1:{server.port}/postgres"
    assert f"ledger {shown}?schema=" in said["wrong-password"]
    assert "cannot be used: authentication failed" in said["wrong-password"]
    assert (
        f"ledger {shown.replace(str(server.port), str(free_port))}?connect_timeout=5: cannot be used: connection refused"
        in said["no-server"]
    )
    assert "the password has a % that is not an escape" in said["stray-%"]
    assert "the ledger URL has an @ after its host" in said["unencoded-/"]
    assert "no ledger there" in said["no-ledger"]


def test_the_two_forms_of_a_ledger_must_agree(server, source, capsys):
    url = good_urls(server)["userinfo"]
    for argv in (
        ["ledger", "show", url, "--ledger", str(source)],
        ["ledger", "backup", url, "x.db", "--ledger", str(source)],
        ["analysts", "list", str(source), "--ledger", url],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""
        one_line(err, argv[0])
        assert "name different ledgers" in err
        clean(err)
    code, out, err = run(capsys, "ledger", "show")
    assert code == 2 and "give the ledger: LEDGER or --ledger LEDGER" in err


# --- the Python API -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BAD)
def test_the_api_says_no_password_in_its_errors(kind, server, free_port, source, tmp_path):
    url = bad_urls(server, free_port)[kind]
    attempts = [
        lambda: Ledger(url, None, create=False),
        lambda: backup_ledger(url, tmp_path / "b.db"),
        lambda: location_of(url),
    ]
    if kind != "no-ledger":  # these would create one
        attempts += [
            lambda: Curator.open(
                data=SAMPLE,
                schema=SCHEMA,
                budget=PureDP(1.0),
                ledger=url,
                separator=",",
                header=True,
            ),
            lambda: copy_ledger(source, url),
        ]
    for attempt in attempts:
        try:
            shown = attempt()
        except LedgerError as err:
            assert "\n" not in str(err)
            clean(str(err))
        else:  # only the shown form may be computed
            assert attempt is attempts[2], kind
            clean(shown)


# --- serve: a real process -------------------------------------------------------------------


def start(argv: list[object], cwd: Path) -> tuple[subprocess.Popen, list[str]]:
    """``dpcurator serve`` started, and its stdout up to the ``listening on`` line."""
    p = subprocess.Popen(
        [sys.executable, "-m", "dpcurator.cli", "serve", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    assert p.stdout is not None
    lines: list[str] = []
    while True:
        line = p.stdout.readline()
        if not line:
            p.wait(timeout=60)
            pytest.fail(f"the server exited: {p.stderr.read() if p.stderr else ''}")
        lines.append(line.rstrip("\n"))
        if line.startswith("listening on "):
            return p, lines


def stop(p: subprocess.Popen) -> tuple[str, str]:
    p.terminate()
    return p.communicate(timeout=60)


def config(tmp: Path, url: str) -> Path:
    path = tmp / "serve.toml"
    path.write_text(
        f"""
[budget]
epsilon = 1
[ledger]
url = "{url}"
anchor = "{tmp / 'ledger.anchor'}"
[server]
port = 0
[tables.adult]
data = "{SAMPLE}"
schema = "{SCHEMA}"
separator = ","
header = true
"""
    )
    return path


@pytest.mark.parametrize("how", ["userinfo", "sslpassword=", "socket", "config"])
def test_serve_never_shows_the_password(how, server, tmp_path):
    """Its start, the command its hint gives (which works once PASSWORD is filled in), its
    JSON and dashboard; and its log when the ledger's password stops working."""
    url = good_urls(server)["userinfo" if how == "config" else how]
    if how == "config":
        argv: list[object] = ["--config", config(tmp_path, url)]
    else:
        argv = ["--ledger", url, "--anchor", tmp_path / "ledger.anchor"]
        argv += [*DATA, "--epsilon", "1", "--port", "0"]
    p, lines = start(argv, tmp_path)
    try:
        clean(*lines)
        (hint,) = [ln for ln in lines if ln.startswith("analysts: ")]
        assert "PASSWORD there stands for the ledger's password" in hint
        (command,) = re.findall(r"`(dpcurator analysts add NAME --ledger [^`]+)`", hint)
        typed = command.replace("NAME", "ann").replace(":PASSWORD@", f":{ENCODED}@")
        typed = typed.replace("password=PASSWORD", f"password={ENCODED}")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*shlex.split(typed)[1:], "--admin", "--json"]) == 0
        clean(buf.getvalue())
        h = {"Authorization": f"Bearer {json.loads(buf.getvalue())['token']}"}
        base = lines[-1].split()[-1]
        for route in (
            "/v1/schema",
            "/v1/budget",
            "/v1/admin/analysts",
            "/v1/admin/ledger",
            "/v1/dashboard/overview",
            "/dashboard",
        ):
            r = httpx.get(base + route, headers=h, timeout=30)
            assert r.status_code == 200, (route, r.text)
            clean(r.text)
        r = httpx.post(
            f"{base}/v1/count", json={"query": "age < 30", "epsilon": 0.1}, headers=h, timeout=30
        )
        assert r.status_code == 200, r.text
        server.set_password("something else")  # and its sessions ended
        try:
            r = httpx.post(
                f"{base}/v1/count",
                json={"query": "age < 40", "epsilon": 0.1},
                headers=h,
                timeout=30,
            )
            assert r.status_code == 503 and r.json()["error"] == "ledger_unavailable", r.text
            clean(r.text)
        finally:
            server.set_password(SECRET)
    finally:
        out, err = stop(p)
    clean(out, err)
    assert "ledger error: ledger postgresql" in err and "authentication failed" in err, err


@pytest.mark.parametrize("kind", ["wrong-password", "stray-%", "unencoded-&", "no-server"])
@pytest.mark.parametrize("how", ["--ledger", "config"])
def test_serve_fails_in_one_line_without_the_password(kind, how, server, free_port, tmp_path):
    url = bad_urls(server, free_port)[kind]
    if how == "config":
        argv: list[object] = ["--config", config(tmp_path, url)]
    else:
        argv = ["--ledger", url, *DATA, "--epsilon", "1", "--port", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "dpcurator.cli", "serve", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == "", done
    one_line(done.stderr, "serve")
    clean(done.stderr)
