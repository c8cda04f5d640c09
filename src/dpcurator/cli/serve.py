"""``dpcurator serve``: the curator as an HTTP service (FastAPI on uvicorn).

One process owns the data and answers with the ledger's budget; analysts reach it with
bearer tokens (``dpcurator analysts add``). Several processes, on one host or many, may
serve the same data on one ledger: an SQLite file on one host, or a PostgreSQL database
(``--ledger postgresql://...``) for replicas on several hosts behind a proxy. On start it
says who can use it (how to add an analyst when the ledger has none; the token under
``--demo``), where the dashboard and the API's reference are, and last ``listening on
URL`` (flushed), so that a script can read the port when ``--port 0`` picked a free one.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import shlex
import signal
import socket
import ssl
import sys
import tempfile
import threading
import tomllib
from pathlib import Path
from typing import Any

from dpcurator.cli import options, serve_interpreter, serve_workers
from dpcurator.curator.stores import is_url, location_of, target_of
from dpcurator.errors import InvalidParameter

_EPILOG = """\
a config file (--config FILE.toml) can hold everything, and flags override it:

  [budget]            # exactly one of epsilon (with delta), rho, mu
  epsilon = 1.0
  [ledger]
  path = "ledger.db"            # or, shared by several servers:
  # url = "postgresql://dpcurator@db.internal/curator"
  # anchor = "/var/lib/dpcurator/ledger.anchor"   # required with url
  verify_every = 60             # seconds between re-verifications of the whole ledger
  [server]
  host = "127.0.0.1"
  port = 8000
  ssl_certfile = "cert.pem"     # both, for https
  ssl_keyfile = "key.pem"
  max_body_bytes = 1000000
  requests_per_second = 20      # per analyst
  burst = 40
  workers = 1                   # processes serving one port and ledger (--workers)
  read_timeout = 30             # seconds to send a whole request (or take an answer)
  max_connections = 1000        # open at once; past it a stuck or idle one is closed
  rate_limit_scope = "auto"     # shared: one bucket per analyst for every server on the
                                # ledger (in its database, or a file beside a ledger
                                # file); server: each its own; auto (default): shared
                                # when the ledger is postgresql:// or workers > 1
  request_time_limit = 10       # seconds to decide one request (past it: 503, no charge)
  solver_time_limit = 5         # seconds of exact overlap checks per request
  solver_threads = 4            # exact checks at once (each analyst's one at a time)
  solver_processes = true       # their search in as many worker processes (false: threads)
  gate = true                   # a process of its own answers the 401s that need no
                                # curator (plain http only; false: the server does)
  max_cells = 50000             # cells of one histogram or marginal
  max_queries = 10000           # queries of one batch or workload (macros expanded)
  max_charges = 10000           # ledger rows one request may write
  max_request_cells = 50000     # cells of one whole request: every line's cells,
                                # statistics' groups (x candidates x quantiles)
  [data]
  privacy_unit = "user_id:3"    # a person may own up to 3 rows (--privacy-unit)
  unit_name = "person"          # what one unit is, in every text (--unit-name)
                                # (or the older [privacy_unit] column, max_rows, name)
  [tables.visits]               # one section per table (or --data/--schema)
  data = "visits.csv"
  schema = "visits.json"
  separator = ","

Analysts need tokens: dpcurator analysts add NAME --ledger LEDGER [--quota Q] [--admin].
Try it: dpcurator serve --demo (the shipped Adult sample, a temporary ledger, a token)."""

ROOT = Path(__file__).resolve().parents[3]
#: A served curator's default work limits per request: a request of a few bytes (a
#: marginal of two wide columns, a workload of wide histograms) is refused at once
#: rather than keeping the server busy for minutes.
SERVER_MAX_CELLS = 50_000
SERVER_MAX_QUERIES = 10_000
SERVER_MAX_CHARGES = 10_000
#: A whole request's cells (every line of a workload together, a statistic's groups):
#: a mean by 50,000 groups takes some 5 s to answer (6.7 MB of JSON), so a request of
#: many such lines is refused at once.
SERVER_MAX_REQUEST_CELLS = 50_000
#: Seconds a served request may take to be decided (it is then refused, nothing charged).
SERVER_REQUEST_TIME_LIMIT = 10.0
DEMO_DATA = ROOT / "examples" / "data" / "adult-sample.csv"
DEMO_SCHEMA = ROOT / "examples" / "adult" / "schema.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve the curator over HTTP to authenticated analysts",
        description="Hold the data, the ledger and the budget, and answer analysts' "
        "requests over HTTP (JSON, bearer tokens). Analysts never see a row.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", metavar="FILE", help="CSV (optionally .gz) or Parquet")
    p.add_argument("--schema", metavar="S.json", help="schema file (JSON)")
    options.add_budget(p)
    p.add_argument(
        "--ledger",
        metavar="LEDGER",
        help="the ledger (created if missing): an SQLite file, or "
        "postgresql://user@host/dbname[?schema=NAME] shared by several servers",
    )
    p.add_argument(
        "--anchor",
        metavar="FILE",
        help="a file outside the ledger's store where the server records the ledger's "
        "heads, so that a rollback is refused (default: LEDGER.anchor beside an SQLite "
        "file; required for PostgreSQL)",
    )
    p.add_argument("--config", metavar="FILE.toml", help="tables, budget, limits, TLS")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--ssl-certfile", metavar="PEM", help="TLS certificate (with --ssl-keyfile)")
    p.add_argument("--ssl-keyfile", metavar="PEM", help="TLS private key")
    p.add_argument(
        "--demo",
        action="store_true",
        help="serve the shipped Adult sample under epsilon 1 with a temporary ledger, "
        "and print an analyst's token",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="serve from N processes on one port and one ledger, to use N cores "
        "(default 1; [server] workers)",
    )
    p.add_argument(serve_workers.WORKER_FLAG, help=argparse.SUPPRESS)
    options.add_loading(p)
    options.add_privacy_unit(p)
    p.set_defaults(handler=run)


def _config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as err:
        raise InvalidParameter(f"--config {path}: cannot read: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise InvalidParameter(f"--config {path}: not valid TOML: {err}") from None


def _section(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    v = cfg.get(name, {})
    if not isinstance(v, dict):
        raise InvalidParameter(f"--config: [{name}] must be a table")
    return v


#: The keys each section of --config may hold ([tables.NAME] is checked on its own).
_KEYS = {
    "budget": {"epsilon", "delta", "rho", "mu"},
    "ledger": {"path", "url", "anchor", "verify_every"},
    "server": {
        "host",
        "port",
        "ssl_certfile",
        "ssl_keyfile",
        "max_body_bytes",
        "requests_per_second",
        "burst",
        "rate_limit_scope",
        "request_time_limit",
        "solver_time_limit",
        "solver_threads",
        "solver_processes",
        "gate",
        "max_cells",
        "max_queries",
        "max_charges",
        "max_request_cells",
        "workers",
        "read_timeout",
        "max_connections",
    },
    "data": {"privacy_unit", "unit_name"},
    "privacy_unit": {"column", "max_rows", "name"},  # the older form of [data] privacy_unit
    "tables": None,
}


def _known(cfg: dict[str, Any]) -> None:
    """Refuse a section or key --config does not know (a typo would be ignored)."""
    for name in cfg:
        if name not in _KEYS:
            raise InvalidParameter(
                f"--config: unknown section [{name}]; known: {', '.join(sorted(_KEYS))}"
            )
        keys = _KEYS[name]
        unknown = sorted(set(_section(cfg, name)) - keys) if keys is not None else []
        if unknown:
            raise InvalidParameter(f"--config: unknown key [{name}] {unknown[0]}")


def _text(section: dict[str, Any], name: str, key: str, default: str | None = None) -> str | None:
    v = section.get(key, default)
    if v is not None and not (isinstance(v, str) and v):
        raise InvalidParameter(f"--config: [{name}] {key} must be non-empty text, got {v!r}")
    return v


def _ledger_config(section: dict[str, Any]) -> str | None:
    """[ledger] path (a file) or url (a PostgreSQL database), not both."""
    path, url = _text(section, "ledger", "path"), _text(section, "ledger", "url")
    if path is not None and url is not None:
        raise InvalidParameter("--config: give [ledger] path or url, not both")
    if url is not None and not url.startswith(("postgresql://", "postgres://")):
        raise InvalidParameter(
            "--config: [ledger] url must be postgresql://user@host/dbname (a file goes in "
            "[ledger] path)"
        )
    return path or url


#: Seconds between a server's re-verifications of its whole ledger, unless configured.
SERVER_VERIFY_EVERY = 60.0


def _anchoring(
    args: argparse.Namespace, section: dict[str, Any], ledger: str
) -> tuple[str | bool, float]:
    """The ledger's anchor (``--anchor``, ``[ledger] anchor``; True: beside an SQLite
    file) and ``[ledger] verify_every``; a PostgreSQL ledger must be given an anchor."""
    anchor = args.anchor or _text(section, "ledger", "anchor")
    name = target_of(ledger)
    if anchor is None and name is not None and is_url(name):
        raise InvalidParameter(
            f"--ledger {location_of(name)}: a PostgreSQL ledger needs --anchor FILE (or "
            "[ledger] anchor in --config): a file outside the database, where this server "
            "records the ledger's heads, so that a rollback of the database is refused"
        )
    every = section.get("verify_every", SERVER_VERIFY_EVERY)
    if isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every <= 86_400:
        raise InvalidParameter(
            f"--config: [ledger] verify_every must be a number of seconds in (0, 86400], "
            f"got {every!r}"
        )
    return (True if anchor is None else anchor), float(every)


def _within(
    server: dict[str, Any],
    key: str,
    default: float,
    low: float,
    high: float,
    *,
    integer: bool = False,
):
    """A positive ``[server] key`` in [low, high] (else a one-line error)."""
    v = _positive(server, key, default, integer=integer)
    if not low <= v <= high:
        raise InvalidParameter(
            f"--config: [server] {key} must be between {low:,} and {high:,}, got {v!r}"
        )
    return v


def _positive(server: dict[str, Any], key: str, default: float, *, integer: bool = False):
    v = server.get(key, default)
    ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v > 0
    if ok and integer and v != int(v):
        ok = False
    if not ok:
        what = "a positive integer" if integer else "a positive number"
        raise InvalidParameter(f"--config: [server] {key} must be {what}, got {v!r}")
    return int(v) if integer else float(v)


def _flag(server: dict[str, Any], key: str, default: bool) -> bool:
    v = server.get(key, default)
    if not isinstance(v, bool):
        raise InvalidParameter(f"--config: [server] {key} must be true or false, got {v!r}")
    return v


def _gate_wanted(server: dict[str, Any], cert: str | None) -> bool:
    """Whether a gate answers the 401s that need no curator (:mod:`dpcurator.service.gate`):
    by default wherever it can, which is plain HTTP on a system that passes sockets
    between processes (a TLS connection cannot be handed over)."""
    can = cert is None and hasattr(socket, "send_fds")
    wanted = _flag(server, "gate", can)
    if wanted and cert is not None:
        raise InvalidParameter(
            "--config: [server] gate = true needs plain http (a TLS connection cannot be "
            "handed from the gate to the server); set gate = false, or put TLS in a proxy"
        )
    if wanted and not can:
        raise InvalidParameter("--config: [server] gate = true: this system cannot pass sockets")
    return wanted


def _budget(args: argparse.Namespace, cfg: dict[str, Any]) -> object:
    b = _section(cfg, "budget")
    unknown = set(b) - {"epsilon", "delta", "rho", "mu"}
    if unknown:
        raise InvalidParameter(f"--config: unknown key [budget] {sorted(unknown)[0]}")
    if all(getattr(args, k) is None for k in ("epsilon", "delta", "rho", "mu")):
        for k in ("epsilon", "delta", "rho", "mu"):
            v = b.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise InvalidParameter(f"--config: [budget] {k} must be a number")
            setattr(args, k, None if v is None else float(v))
    return options.budget_from(args)


#: The loading options a ``[tables.NAME]`` section may set.
_LOAD_KEYS = ("separator", "header", "columns", "skip", "on_invalid", "max_dropped")


def _tables(args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, tuple[Any, Any, dict]]:
    """{name: (data, schema, load options)} from the flags or the config."""
    if args.data is not None or args.schema is not None:
        if args.data is None or args.schema is None:
            raise InvalidParameter("give both --data and --schema (or [tables] in --config)")
        return {"data": (args.data, args.schema, options.load_options(args))}
    tables = _section(cfg, "tables")
    if not tables:
        raise InvalidParameter(
            "give --data and --schema, a [tables] section in --config, or --demo"
        )
    out = {}
    for name, t in tables.items():
        if not isinstance(t, dict) or "data" not in t or "schema" not in t:
            raise InvalidParameter(f"--config: [tables.{name}] needs data and schema")
        extra = set(t) - {"data", "schema", *_LOAD_KEYS}
        if extra:
            raise InvalidParameter(f"--config: unknown key [tables.{name}] {sorted(extra)[0]}")
        load = {k: t[k] for k in _LOAD_KEYS if k in t}
        out[name] = (t["data"], t["schema"], load)
    return out


def _configured_unit(cfg: dict[str, Any]) -> Any:
    """The config's privacy unit: ``[data] privacy_unit = "COLUMN:K"`` (and
    ``unit_name``), or the older ``[privacy_unit]`` ``column``, ``max_rows`` (and
    ``name``); both only if they say the same."""
    from dpcurator.curator.privacy_unit import DEFAULT_NAME, PrivacyUnit, check_rows

    data, old = _section(cfg, "data"), _section(cfg, "privacy_unit")
    new = None
    if "privacy_unit" in data:
        text = _text(data, "data", "privacy_unit")
        assert text is not None
        column, k = options.parse_privacy_unit(text, "--config: [data] privacy_unit")
        name = options.unit_name(_text(data, "data", "unit_name"), "--config: [data] unit_name")
        new = PrivacyUnit(column, k, name or DEFAULT_NAME)
    elif "unit_name" in data:
        raise InvalidParameter("--config: [data] unit_name goes with [data] privacy_unit")
    before = None
    if old:
        if "column" not in old or "max_rows" not in old:
            raise InvalidParameter("--config: [privacy_unit] needs column and max_rows")
        id_column = _text(old, "privacy_unit", "column")
        assert id_column is not None
        max_rows = check_rows(old["max_rows"], "--config: [privacy_unit] max_rows")
        old_name = options.unit_name(
            _text(old, "privacy_unit", "name"), "--config: [privacy_unit] name"
        )
        before = PrivacyUnit(id_column, max_rows, old_name or DEFAULT_NAME)
    if new is not None and before is not None and new != before:
        raise InvalidParameter(
            "--config: [data] privacy_unit and [privacy_unit] name different units; give one"
        )
    return new or before


def _privacy_unit(args: argparse.Namespace, cfg: dict[str, Any]) -> Any:
    """The unit served: --privacy-unit replaces the config's whole unit (its name too),
    --unit-name alone renames the config's unit."""
    unit = _configured_unit(cfg)  # checked even when the flag replaces it
    if args.privacy_unit is not None or unit is None:
        return options.privacy_unit_from(args)  # (refuses a name without a unit)
    if args.unit_name is None:
        return unit
    return dataclasses.replace(unit, name=options.unit_name(args.unit_name))


def _open(args: argparse.Namespace, cfg: dict[str, Any], ledger: str, limit: float):
    from dpcurator import Curator
    from dpcurator.curator.requests import RequestLimits

    server = _section(cfg, "server")
    work = RequestLimits(
        max_cells=_positive(server, "max_cells", SERVER_MAX_CELLS, integer=True),
        max_queries=_positive(server, "max_queries", SERVER_MAX_QUERIES, integer=True),
        max_charges=_positive(server, "max_charges", SERVER_MAX_CHARGES, integer=True),
        max_request_cells=_positive(
            server, "max_request_cells", SERVER_MAX_REQUEST_CELLS, integer=True
        ),
    )

    budget = _budget(args, cfg)
    tables = _tables(args, cfg)
    privacy_unit = _privacy_unit(args, cfg)
    anchor, every = _anchoring(args, _section(cfg, "ledger"), ledger)
    loads = [load for _, _, load in tables.values()]
    if any(load != loads[0] for load in loads):
        raise InvalidParameter("--config: every table must be loaded with the same options")
    return Curator.open(
        tables={n: (d, s) for n, (d, s, _) in tables.items()},
        budget=budget,
        ledger=ledger,
        anchor=anchor,
        verify_every=every,
        privacy_unit=privacy_unit,
        solver_time_limit=limit,
        request_time_limit=_positive(server, "request_time_limit", SERVER_REQUEST_TIME_LIMIT),
        solver_threads=_positive(server, "solver_threads", 4, integer=True),
        solver_processes=_flag(server, "solver_processes", True),
        limits=work,
        **loads[0],
        **options.backend_options(args),
    )


def _stoppable_server(config: Any, curator: Any, gate: Any = None) -> Any:
    """A uvicorn server for ``config`` that stops ``curator`` at its first signal, and
    takes the connections of ``gate`` (a :class:`~dpcurator.service.handoff.GateLink`)."""
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which also stops the curator's undecided requests at the
        first SIGINT or SIGTERM: they answer 503 at once, and what was not charged yet
        never is, so the graceful shutdown ends within seconds."""

        def __init__(self, config: uvicorn.Config, curator: Any) -> None:
            super().__init__(config)
            self.curator = curator
            self.gate_ended = False

        async def startup(self, sockets: Any = None) -> None:
            from dpcurator.service.connection_notes import noting_accept_errors

            asyncio.get_running_loop().set_exception_handler(noting_accept_errors)
            await super().startup(sockets=sockets)
            if gate is not None:
                config = self.config

                def create_protocol() -> asyncio.Protocol:  # as uvicorn's own startup
                    return config.http_protocol_class(  # type: ignore[call-arg]
                        config=config, server_state=self.server_state, app_state=self.lifespan.state
                    )

                gate.ended = self._gate_ended
                await gate.attach(create_protocol)

        def _gate_ended(self) -> None:
            self.gate_ended = True
            self.handle_exit(signal.SIGTERM, None)

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.curator.stop()
            if gate is not None:
                gate.close()  # it accepts nothing more
            super().handle_exit(sig, frame)

    return Server(config, curator)


def _data_lines(curator: Any) -> list[str]:
    """Whom every cost protects, and what loading kept of each table: the custodian's
    own view (the rows depend on the data; no route returns them)."""
    from dpcurator.cli import load_report

    unit = curator.privacy_unit
    first = (
        "privacy unit: none, so every cost is per row (--privacy-unit COLUMN:K when one "
        "person may own several rows)"
        if unit is None
        else f"privacy unit: every cost is {unit.describe()}"
    )
    loaded = load_report.lines(curator.load_reports(), unit)
    return [first, *(f"data: {line}" for line in loaded)]


def _analysts_line(curator: Any, ledger: str) -> str:
    """Who can use the server, and how to add someone: a fresh ledger has no analyst,
    and nothing else would tell the custodian that no request can be answered yet. The
    command names the ledger with ``PASSWORD`` in place of each secret of its URL."""
    from dpcurator.curator.stores import template_of

    shown = template_of(ledger)
    add = f"`dpcurator analysts add NAME --ledger {shlex.quote(shown)}`"
    note = (
        ""
        if shown == ledger
        else "; PASSWORD there stands for the ledger's password (or leave it out and use a "
        "passfile or PGPASSWORD)"
    )
    n = sum(1 for a in curator.ledger.credentials() if a.active)
    if n == 0:
        return (
            f"analysts: none yet, so no request can be answered; add one with {add} "
            f"(it prints her token; this server sees her at her next request){note}"
        )
    return f"analysts: {n} with a working token; add another with {add}{note}"


class _Stopped(Exception):
    """SIGTERM arrived (uvicorn re-raises it once it has shut down gracefully)."""


def _stopped(signum: int, frame: object) -> None:
    raise _Stopped


def _serve_until_stopped(server: Any, sockets: list[socket.socket]) -> None:
    """Serve until SIGINT or SIGTERM. uvicorn shuts down gracefully, then raises the
    signal again; SIGTERM then ends this call (so that the ledger is closed and the
    demo's temporary files removed) instead of killing the process on the spot."""
    if threading.current_thread() is not threading.main_thread():
        server.run(sockets=sockets)
        return
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run(sockets=sockets)
    except _Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket: a TCP socket by protocol, so that asyncio sets TCP_NODELAY
    on each connection (without it every response waits ~40 ms for the client's
    delayed ACK)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise InvalidParameter(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(128)
    return sock


def _url(host: str, sock: socket.socket, cert: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if cert else 'http'}://{shown}:{sock.getsockname()[1]}"


def _supervise(
    args: argparse.Namespace,
    cfg: dict[str, Any],
    host: str,
    port: int,
    cert: str | None,
    workers: int,
) -> int:
    """``--workers N`` (N > 1): bind the port, then run N workers on it
    (:mod:`dpcurator.cli.serve_workers`); the data and the ledger are theirs to open."""
    if args.demo:
        raise InvalidParameter(
            "--workers: the demo serves from one process (its ledger is temporary); give "
            "--data and --ledger to serve with workers"
        )
    ledger = args.ledger or _ledger_config(_section(cfg, "ledger"))
    if ledger is None or (target_of(ledger) or ledger) == ":memory:":
        raise InvalidParameter(
            "--workers needs a ledger every worker opens: --ledger FILE or --ledger "
            "postgresql://..."
        )
    serve_workers.std_streams_open()
    sock = _listen(host, port)
    try:
        with tempfile.TemporaryDirectory(prefix="dpcurator-workers-") as private:
            argv = getattr(args, "argv", None) or sys.argv[1:]
            argv = [*argv, *serve_workers.pinned(args.config, private)]
            return serve_workers.supervise(argv, sock, workers, _url(host, sock, cert))
    finally:
        sock.close()


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from dpcurator.service import Limits, create_app
    from dpcurator.service.http_protocol import (
        BACKLOG,
        MAX_CONNECTIONS_RANGE,
        MIN_CONNECTIONS,
        READ_TIMEOUT_RANGE,
        RESERVED_FDS,
        protocol,
        raise_fd_limit,
    )
    from dpcurator.service.limits import RATE_SCOPES, SharedRateLimiter

    cfg = _config(args.config)
    _known(cfg)
    server = _section(cfg, "server")
    host = args.host or _text(server, "server", "host", "127.0.0.1")
    port = args.port if args.port is not None else server.get("port", 8000)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidParameter(f"--port must be 0..65535, got {port!r}")
    cert = args.ssl_certfile or _text(server, "server", "ssl_certfile")
    key = args.ssl_keyfile or _text(server, "server", "ssl_keyfile")
    if (cert is None) != (key is None):
        raise InvalidParameter("give both --ssl-certfile and --ssl-keyfile, or neither")
    for f in (cert, key):
        if f is not None and not Path(f).is_file():
            raise InvalidParameter(f"TLS file {f} not found")
    use_gate = _gate_wanted(server, cert)
    if cert is not None:
        try:  # a bad certificate or key is refused now, not after "listening on"
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as err:
            raise InvalidParameter(
                f"TLS: cannot use certificate {cert} with key {key}: {err}"
            ) from None
    scope = _text(server, "server", "rate_limit_scope", "auto")
    if scope not in RATE_SCOPES:
        raise InvalidParameter(
            f"--config: [server] rate_limit_scope must be one of {', '.join(RATE_SCOPES)}, "
            f"got {scope!r}"
        )
    workers = serve_workers.workers_of(args.workers, server)
    worker = None if args.worker is None else serve_workers.parse_worker(args.worker)
    if worker is not None:
        serve_workers.die_with(worker[1])
    if workers > 1 and scope == "auto":
        scope = "shared"  # N workers, one analyst's rate
    limits = Limits(
        max_body_bytes=_positive(server, "max_body_bytes", 1_000_000, integer=True),
        requests_per_second=_positive(server, "requests_per_second", 20.0),
        burst=_positive(server, "burst", 40, integer=True),
        rate_scope=scope,
        read_timeout=_within(server, "read_timeout", Limits.read_timeout, *READ_TIMEOUT_RANGE),
        max_connections=_within(
            server, "max_connections", Limits.max_connections, *MAX_CONNECTIONS_RANGE, integer=True
        ),
    )
    fit = raise_fd_limit(limits.max_connections)
    if fit < min(MIN_CONNECTIONS, limits.max_connections):
        raise InvalidParameter(
            f"this process may open too few files to serve (ulimit -n): room for {fit} "
            f"connections; raise the limit to at least {MIN_CONNECTIONS + RESERVED_FDS}"
        )
    time_limit = server.get("solver_time_limit", 5.0)
    if isinstance(time_limit, bool) or not isinstance(time_limit, int | float):
        raise InvalidParameter(
            f"--config: [server] solver_time_limit must be a number of seconds, got {time_limit!r}"
        )
    token = None
    tmp = None
    if workers > 1 and worker is None:
        return _supervise(args, cfg, host, port, cert, workers)
    if args.demo:
        tmp = tempfile.TemporaryDirectory(prefix="dpcurator-demo-")
        args.data, args.schema = str(DEMO_DATA), str(DEMO_SCHEMA)
        if all(getattr(args, k) is None for k in ("epsilon", "rho", "mu")):
            args.epsilon = 1.0
        ledger = str(Path(tmp.name) / "ledger.db")
    else:
        ledger = args.ledger or _ledger_config(_section(cfg, "ledger"))
        if ledger is None:
            raise InvalidParameter(
                "give --ledger FILE or --ledger postgresql://... (the server's budget must "
                "outlive it)"
            )
    curator = _open(args, cfg, ledger, time_limit)
    rate = None
    gate = None
    try:
        if curator.ledger.anchor_started:
            sys.stderr.write(
                f"dpcurator serve: note: the anchor {curator.ledger.anchor} had no entry; it "
                f"now records the ledger's heads ({curator.ledger.head[0]} charges). If it "
                "had entries before, the ledger may have been rolled back: compare its head "
                "(dpcurator ledger head) with the one your last backup printed\n"
            )
        if args.demo:
            token = curator.add_analyst("demo", admin=True)
        app = create_app(curator, limits)
        rate = app.state.rate
        quiet = worker is not None and worker[2]
        if isinstance(app.state.rate, SharedRateLimiter) and not quiet:
            sys.stderr.write(
                f"dpcurator serve: note: the rate limit ({limits.requests_per_second:g} "
                f"requests a second per analyst, {limits.burst} at once) is shared by every "
                "server on this ledger ([server] rate_limit_scope)\n"
            )
        sock = _listen(host, port) if worker is None else worker[0]
        url = _url(host, sock, cert)
        if token is not None:
            print(f"demo: the Adult sample under epsilon 1; ledger {ledger} (deleted on exit)")
            print(f"demo: analyst token (an administrator): {token}")
            print(
                f"demo: curl -H 'Authorization: Bearer {token}' "
                "-H 'Content-Type: application/json' "
                f'-d \'{{"query": "age < 30", "epsilon": 0.1}}\' '
                f"{url}/v1/count"
            )
        else:
            print(_analysts_line(curator, ledger))
        print(f"dashboard: {url}/dashboard (sign in with a token); the API: {url}/docs")
        for line in _data_lines(curator):
            print(line)
        if fit < limits.max_connections and not quiet:
            sys.stderr.write(
                f"dpcurator serve: note: this process may open too few files for "
                f"max_connections = {limits.max_connections} (ulimit -n); it holds at most "
                f"{fit} connections at once\n"
            )
        config = uvicorn.Config(
            app,
            # h11 (never httptools), a deadline for each request, a cap on connections;
            # no WebSocket: no route uses it (dpcurator.service.http_protocol)
            http=protocol(dataclasses.replace(limits, max_connections=fit)),
            backlog=BACKLOG,
            ws="none",
            log_level="warning",
            ssl_certfile=cert,
            ssl_keyfile=key,
            timeout_graceful_shutdown=5,
        )
        if use_gate:
            from dpcurator.service.handoff import GateError, GateLink, gate_plan

            try:
                gate = GateLink(
                    sock,
                    gate_plan(app),
                    ledger=curator.ledger,
                    read_timeout=limits.read_timeout,
                    max_connections=fit,
                    # uvicorn's, as it writes them
                    default_headers=[("server", "uvicorn")] if config.server_header else [],
                    keep_alive=config.timeout_keep_alive,
                )
            except GateError as err:
                if "gate" in server:  # asked for: its failure is the server's
                    raise
                sys.stderr.write(f"dpcurator serve: note: {err}; serving without it\n")
            else:
                sock.close()  # the gate's now: closed with it, new clients are refused
        serve_interpreter.tune()
        curator.warm_solvers()
        print(f"listening on {url}", flush=True)
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        stoppable = _stoppable_server(config, curator, gate)
        _serve_until_stopped(stoppable, [] if gate is not None else [sock])
        if stoppable.gate_ended:
            from dpcurator.service.handoff import GateError

            raise GateError("the gate process ended; the server stopped (see the log)")
    finally:
        if gate is not None:
            gate.stop()
        if isinstance(rate, SharedRateLimiter):
            rate.close()
        curator.close()
        if tmp is not None:
            tmp.cleanup()
    return 0
