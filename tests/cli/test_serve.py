"""``dpcurator serve``: one-line errors before serving, the ``listening on`` line, --demo."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dpcurator.cli import main
from dpcurator.curator.ledger import Ledger

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
    ]
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "people.csv"
    data.write_text("age,sex\n" + "".join(f"{i % 100},{'FM'[i % 2]}\n" for i in range(50)))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return {"data": data, "schema": schema, "ledger": tmp_path / "ledger.db", "dir": tmp_path}


@pytest.fixture(scope="module")
def busy() -> int:
    """A port that is in use: an in-process ``serve`` that wrongly accepted its input
    fails to listen there instead of serving for ever."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def serve(capsys, busy: int):
    def run(*argv: object) -> tuple[int, str, str]:
        args = [str(a) for a in argv]
        if "--port" in args:
            args[args.index("--port") + 1] = str(busy)
        code = main(["serve", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def base(f: dict[str, Path], *, budget: bool = True) -> list[object]:
    args: list[object] = ["--data", f["data"], "--schema", f["schema"], "--ledger", f["ledger"]]
    return [*args, "--epsilon", "1"] if budget else args


def one_error_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith("dpcurator serve: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def config(f: dict[str, Path], text: str) -> Path:
    p = f["dir"] / "server.toml"
    p.write_text(text)
    return p


# --- bad input: one line on stderr, exit status 2, nothing served --------------------------


def test_no_budget(files, serve) -> None:
    code, out, err = serve(*base(files, budget=False), "--port", "0")
    assert code == 2 and out == ""
    one_error_line(err, "budget")


def test_two_budgets(files, serve) -> None:
    code, _, err = serve(*base(files), "--rho", "0.5", "--port", "0")
    assert code == 2
    one_error_line(err, "exactly one budget")


@pytest.mark.parametrize("missing", ["--data", "--schema"])
def test_data_and_schema_go_together(files, serve, missing: str) -> None:
    args = base(files)
    i = args.index(missing)
    del args[i : i + 2]
    code, out, err = serve(*args, "--port", "0")
    assert code == 2 and out == ""
    one_error_line(err, "--data", "--schema")


def test_no_ledger(files, serve) -> None:
    args = base(files)
    i = args.index("--ledger")
    del args[i : i + 2]
    code, _, err = serve(*args, "--port", "0")
    assert code == 2
    one_error_line(err, "--ledger")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[server\nport = 1", "not valid TOML"),
        ("server = 3", "[server] must be a table"),
        ("[budget]\nepsilon = 'one'", "[budget] epsilon must be a number"),
        ("[budget]\nepsilom = 1", "unknown key [budget] epsilom"),
        ("[server]\nrequest_per_second = 5", "unknown key [server] request_per_second"),
        ("[serve]\nport = 5", "unknown section [serve]"),
        ("[server]\nrequests_per_second = 0", "requests_per_second must be a positive number"),
        ("[server]\nrequests_per_second = nan", "requests_per_second must be a positive number"),
        ("[server]\nburst = 0", "burst must be a positive integer"),
        ("[server]\nburst = 2.5", "burst must be a positive integer"),
        ("[server]\nread_timeout = 0", "read_timeout must be a positive number"),
        ("[server]\nread_timeout = 'x'", "read_timeout must be a positive number"),
        ("[server]\nread_timeout = inf", "read_timeout must be a positive number"),
        ("[server]\nread_timeout = 100000", "read_timeout must be between 0.01 and 86,400"),
        ("[server]\nread_timeout = 5e-324", "read_timeout must be between 0.01 and 86,400"),
        ("[server]\nread_timeout = 1e400", "read_timeout must be a positive number"),
        ("[server]\nread_timeout = -1", "read_timeout must be a positive number"),
        ("[server]\nread_timeout = [1]", "read_timeout must be a positive number"),
        ("[server]\nread_timeout = {a = 1}", "read_timeout must be a positive number"),
        ("[server]\nmax_connections = 1e400", "max_connections must be a positive integer"),
        ("[server]\nmax_connections = -5", "max_connections must be a positive integer"),
        ("[server]\nmax_connections = '1000'", "max_connections must be a positive integer"),
        (
            "[server]\nmax_connections = 99999999999999999",
            "max_connections must be between 1 and 1,000,000",
        ),
        ("[server]\nmax_connections = 0", "max_connections must be a positive integer"),
        ("[server]\nmax_connections = 2.5", "max_connections must be a positive integer"),
        ("[server]\nmax_connections = true", "max_connections must be a positive integer"),
        ("[server]\nmax_connections = 2000000", "max_connections must be between 1 and 1,000,000"),
        ("[server]\nmax_body_bytes = -1", "max_body_bytes must be a positive integer"),
        ("[server]\nmax_body_bytes = '1MB'", "max_body_bytes must be a positive integer"),
        ("[server]\nsolver_time_limit = 'x'", "solver_time_limit"),
        ("[server]\nsolver_processes = 'yes'", "[server] solver_processes must be true or false"),
        ("[server]\nsolver_processes = 1", "[server] solver_processes must be true or false"),
        ("[server]\nsolver_processes = 1e400", "[server] solver_processes must be true or false"),
        ("[server]\nsolver_time_limit = 100000", "solver_time_limit"),
        ("[server]\nhost = 5", "[server] host must be non-empty text"),
        ("[server]\nport = 'http'", "--port"),
        ("[server]\nport = 70000", "--port"),
        ("[server]\nssl_certfile = 7\nssl_keyfile = 8", "ssl_certfile"),
        ("[ledger]\npath = 3", "[ledger] path must be non-empty text"),
        ("[ledger]\nurl = ''", "[ledger] url must be non-empty text"),
        ("[ledger]\npath = 'l.db'\nurl = 'postgresql://x@y/z'", "[ledger] path or url, not both"),
        ("[ledger]\nurl = 'l.db'", "[ledger] url must be postgresql://"),
        ("[ledger]\nfile = 'l.db'", "unknown key [ledger] file"),
    ],
)
def test_bad_config(files, serve, text: str, words: str) -> None:
    port = [] if "port =" in text else ["--port", "0"]
    args = base(files, budget="[budget]" not in text)
    if "[ledger]" in text:  # the flag would take precedence over the file
        del args[args.index("--ledger") : args.index("--ledger") + 2]
    code, out, err = serve(*args, "--config", config(files, text), *port)
    assert code == 2 and out == ""
    one_error_line(err, words)
    assert not files["ledger"].exists()


def test_a_missing_config_file(files, serve) -> None:
    code, _, err = serve(*base(files), "--config", files["dir"] / "none.toml")
    assert code == 2
    one_error_line(err, "none.toml", "cannot read")


def test_tls_files(files, serve) -> None:
    code, _, err = serve(*base(files), "--ssl-certfile", files["data"], "--port", "0")
    assert code == 2
    one_error_line(err, "--ssl-keyfile")
    missing = files["dir"] / "cert.pem"
    code, _, err = serve(
        *base(files), "--ssl-certfile", missing, "--ssl-keyfile", missing, "--port", "0"
    )
    assert code == 2
    one_error_line(err, "cert.pem", "not found")
    # files that exist but hold no certificate: refused before "listening on"
    code, out, err = serve(
        *base(files), "--ssl-certfile", files["data"], "--ssl-keyfile", files["schema"],
        "--port", "0",
    )  # fmt: skip
    assert code == 2 and "listening" not in out
    one_error_line(err, "TLS", "people.csv")


def test_a_port_in_use(files, serve, busy: int) -> None:
    code, out, err = serve(*base(files), "--port", busy)
    assert code == 2 and "listening" not in out
    one_error_line(err, f"cannot listen on 127.0.0.1:{busy}")


def test_a_bad_port_and_host(files, serve) -> None:
    code, _, err = serve(*base(files), "--port=70000")
    assert code == 2
    one_error_line(err, "--port must be 0..65535")
    code, _, err = serve(*base(files), "--port", "0", "--host", "no-such-host.invalid")
    assert code == 2
    one_error_line(err, "cannot listen on no-such-host.invalid")


def test_data_outside_the_schema(files, serve) -> None:
    files["data"].write_text("age,sex\n30,F\n130,M\n")
    code, _, err = serve(*base(files), "--port", "0")
    assert code == 2
    one_error_line(err, "age")


def test_a_ledger_of_another_curator(files, serve) -> None:
    Ledger(files["ledger"], {"budget": "PureDP(5)", "tables": {}}).close()
    code, _, err = serve(*base(files), "--port", "0")
    assert code == 2
    one_error_line(err, "belongs to another curator")


def test_as_a_command_no_traceback(files) -> None:
    cmd = [sys.executable, "-m", "dpcurator.cli", "serve", *map(str, base(files, budget=False))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    one_error_line(done.stderr, "budget")


# --- serving ------------------------------------------------------------------------------


def start(argv: list[object], cwd: Path) -> tuple[subprocess.Popen, list[str]]:
    """Start ``dpcurator serve`` and read its stdout up to the ``listening on`` line."""
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
            p.wait(timeout=30)
            pytest.fail(f"the server exited: {p.stderr.read() if p.stderr else ''}")
        lines.append(line.rstrip("\n"))
        if line.startswith("listening on "):
            return p, lines


def stop(p: subprocess.Popen) -> tuple[str, str]:
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    return out, err


def test_port_0_prints_the_url_last_and_serves_it(files) -> None:
    p, lines = start([*base(files), "--port", "0"], files["dir"])
    try:
        assert len(lines) == 5 and lines[0].startswith("analysts: none yet")
        assert lines[2].startswith("privacy unit: none, so every cost is per row")
        assert lines[3] == "data: 50 rows read, all used"
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)", lines[-1])
        assert m and 0 < int(m.group(1)) < 65536
        url = lines[-1].split()[-1]
        assert httpx.get(f"{url}/v1/health", timeout=30).json() == {"status": "ok"}
        r = httpx.get(f"{url}/v1/budget", timeout=30)
        assert r.status_code == 401
    finally:
        out, err = stop(p)
    assert p.returncode == 0, err
    assert out == "" and "Traceback" not in err  # nothing printed after the URL
    led = Ledger(files["ledger"], None, create=False)  # closed cleanly, and valid
    assert led.verify() == 0
    led.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_config_file_alone_is_enough(files, kind, request) -> None:
    if kind == "postgresql":
        files["ledger"] = request.getfixturevalue("postgres_stores").new().target
    key = "path" if kind == "sqlite" else "url"
    anchor = "" if kind == "sqlite" else f'anchor = "{files["dir"] / "pg.anchor"}"'
    cfg = config(
        files,
        f"""
[budget]
epsilon = 2
[ledger]
{key} = "{files["ledger"]}"
{anchor}
[server]
host = "127.0.0.1"
port = 0
[tables.people]
data = "{files["data"]}"
schema = "{files["schema"]}"
""",
    )
    p, lines = start(["--config", cfg], files["dir"])
    try:
        url = lines[-1].split()[-1]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(["analysts", "add", "ann", "--ledger", str(files["ledger"]), "--json"])
        assert code == 0
        h = {"Authorization": f"Bearer {json.loads(buf.getvalue())['token']}"}
        schema = httpx.get(f"{url}/v1/schema", headers=h, timeout=30).json()
        assert list(schema["tables"]) == ["people"] and schema["budget"] == "PureDP(epsilon=2.0)"
        r = httpx.post(
            f"{url}/v1/count",
            json={"query": "age < 3", "epsilon": 0.5, "table": "people"},
            headers=h,
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["remaining"] == 1.5
    finally:
        _, err = stop(p)
    assert p.returncode == 0, err


def test_demo(tmp_path: Path) -> None:
    p, lines = start(["--demo", "--port", "0"], tmp_path)
    try:
        url = lines[-1].split()[-1]
        (token,) = re.findall(r"dpc_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", lines[1])
        (curl,) = [ln for ln in lines if ln.startswith("demo: curl ")]
        assert url in curl and token in curl
        argv = shlex.split(curl.removeprefix("demo: "))
        if shutil.which("curl"):
            done = subprocess.run(
                [*argv, "--silent", "--show-error"], capture_output=True, text=True, timeout=60
            )
            answer = json.loads(done.stdout)
        else:  # the same request, as the line says
            headers = dict(h.split(": ", 1) for h in argv[argv.index("-H") + 1 :: 2][:2])
            answer = httpx.post(
                argv[-1], content=argv[argv.index("-d") + 1], headers=headers, timeout=30
            ).json()
        assert answer["query"] == "age < 30" and answer["charge_id"] == 1, answer
        ledger = re.search(r"ledger (\S+) \(deleted on exit\)", lines[0])
        assert ledger is not None and Path(ledger.group(1)).exists()
    finally:
        stop(p)
    assert p.returncode == 0
    assert not Path(ledger.group(1)).exists()


def test_a_fresh_server_says_how_to_add_an_analyst(files) -> None:
    """A new ledger has no analyst: the start says so, with the command that adds one
    (run as printed, it gives a token the running server accepts), and where the
    dashboard is; a server with analysts counts them."""
    p, lines = start([*base(files), "--port", "0"], files["dir"])
    try:
        url = lines[-1].split()[-1]
        (hint,) = [ln for ln in lines if ln.startswith("analysts: ")]
        assert "none yet" in hint
        (command,) = re.findall(r"`(dpcurator analysts add NAME --ledger [^`]+)`", hint)
        argv = shlex.split(command.replace("NAME", "ann"))[1:]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*argv, "--json"]) == 0
        token = json.loads(buf.getvalue())["token"]
        r = httpx.get(f"{url}/v1/budget", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code == 200
        (dash,) = [ln for ln in lines if ln.startswith("dashboard: ")]
        assert f"{url}/dashboard" in dash and f"{url}/docs" in dash
        assert httpx.get(f"{url}/dashboard", timeout=30).status_code == 200
    finally:
        stop(p)
    p, lines = start([*base(files), "--port", "0"], files["dir"])
    stop(p)
    assert "analysts: 1 with a working token; add another with `dpcurator analysts add" in lines[0]


def test_too_few_open_files_is_one_line_and_changes_nothing(files) -> None:
    """A hard limit on open files too low to hold connections: refused before the
    ledger is opened (a soft limit below the need is raised, as far as the hard one)."""
    import resource

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))

    p = subprocess.run(
        [sys.executable, "-m", "dpcurator.cli", "serve", *map(str, base(files)), "--port", "0"],
        capture_output=True,
        text=True,
        preexec_fn=low,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == ""
    one_error_line(p.stderr, "too few files", "ulimit -n", "room for 0 connections")
    assert not files["ledger"].exists()
