"""``dpcurator serve``: the curator as an HTTP service (FastAPI on uvicorn).

One process owns the data, the ledger and the budget; analysts reach it with bearer
tokens (``dpcurator analysts add``). On start it prints ``listening on URL`` (flushed),
so that a script can read the port when ``--port 0`` picked a free one.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from dpcurator.cli import options
from dpcurator.errors import InvalidParameter

_EPILOG = """\
a config file (--config FILE.toml) can hold everything, and flags override it:

  [budget]            # exactly one of epsilon (with delta), rho, mu
  epsilon = 1.0
  [ledger]
  path = "ledger.db"
  [server]
  host = "127.0.0.1"
  port = 8000
  ssl_certfile = "cert.pem"     # both, for https
  ssl_keyfile = "key.pem"
  max_body_bytes = 1000000
  requests_per_second = 20      # per analyst
  burst = 40
  solver_time_limit = 5         # seconds of exact overlap checks per request
  [privacy_unit]                # a person may own up to max_rows rows
  column = "user_id"
  max_rows = 3
  [tables.visits]               # one section per table (or --data/--schema)
  data = "visits.csv"
  schema = "visits.json"
  separator = ","

Analysts need tokens: dpcurator analysts add NAME --ledger FILE [--quota Q] [--admin].
Try it: dpcurator serve --demo (the shipped Adult sample, a temporary ledger, a token)."""

ROOT = Path(__file__).resolve().parents[3]
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
    p.add_argument("--ledger", metavar="L.db", help="SQLite ledger file (created if missing)")
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
    options.add_loading(p)
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


def _tables(args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, tuple[Any, Any, dict]]:
    """{name: (data, schema, load options)} from the flags or the config."""
    if args.data is not None or args.schema is not None:
        if args.data is None or args.schema is None:
            raise InvalidParameter("give both --data and --schema (or [tables] in --config)")
        return {"data": (args.data, args.schema, options.load_options(args))}
    tables = _section(cfg, "tables")
    if not tables:
        raise InvalidParameter("give --data and --schema, a [tables] section in --config, or --demo")
    out = {}
    for name, t in tables.items():
        if not isinstance(t, dict) or "data" not in t or "schema" not in t:
            raise InvalidParameter(f"--config: [tables.{name}] needs data and schema")
        extra = set(t) - {"data", "schema", "separator", "header", "columns", "skip", "on_invalid"}
        if extra:
            raise InvalidParameter(f"--config: unknown key [tables.{name}] {sorted(extra)[0]}")
        load = {k: t[k] for k in ("separator", "header", "columns", "skip", "on_invalid") if k in t}
        out[name] = (t["data"], t["schema"], load)
    return out


def _open(args: argparse.Namespace, cfg: dict[str, Any], ledger: str | None, limit: float):
    from dpcurator import Curator

    budget = _budget(args, cfg)
    tables = _tables(args, cfg)
    unit = _section(cfg, "privacy_unit")
    privacy_unit = (unit.get("column"), unit.get("max_rows")) if unit else None
    loads = [load for _, _, load in tables.values()]
    if any(load != loads[0] for load in loads):
        raise InvalidParameter("--config: every table must be loaded with the same options")
    return Curator.open(
        tables={n: (d, s) for n, (d, s, _) in tables.items()},
        budget=budget,
        ledger=ledger,
        privacy_unit=privacy_unit,
        solver_time_limit=limit,
        **loads[0],
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from dpcurator.service import Limits, create_app

    cfg = _config(args.config)
    server = _section(cfg, "server")
    host = args.host or server.get("host", "127.0.0.1")
    port = args.port if args.port is not None else server.get("port", 8000)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidParameter(f"--port must be 0..65535, got {port!r}")
    cert = args.ssl_certfile or server.get("ssl_certfile")
    key = args.ssl_keyfile or server.get("ssl_keyfile")
    if (cert is None) != (key is None):
        raise InvalidParameter("give both --ssl-certfile and --ssl-keyfile, or neither")
    for f in (cert, key):
        if f is not None and not Path(f).is_file():
            raise InvalidParameter(f"TLS file {f} not found")
    try:
        limits = Limits(
            max_body_bytes=int(server.get("max_body_bytes", 1_000_000)),
            requests_per_second=float(server.get("requests_per_second", 20.0)),
            burst=int(server.get("burst", 40)),
        )
        time_limit = float(server.get("solver_time_limit", 5.0))
    except (TypeError, ValueError):
        raise InvalidParameter("--config: [server] limits must be numbers") from None
    token = None
    tmp = None
    if args.demo:
        tmp = tempfile.TemporaryDirectory(prefix="dpcurator-demo-")
        args.data, args.schema = str(DEMO_DATA), str(DEMO_SCHEMA)
        if all(getattr(args, k) is None for k in ("epsilon", "rho", "mu")):
            args.epsilon = 1.0
        ledger = str(Path(tmp.name) / "ledger.db")
    else:
        ledger = args.ledger or _section(cfg, "ledger").get("path")
        if ledger is None:
            raise InvalidParameter("give --ledger FILE (the server's budget must outlive it)")
    curator = _open(args, cfg, ledger, time_limit)
    try:
        if args.demo:
            token = curator.add_analyst("demo", admin=True)
        app = create_app(curator, limits)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise InvalidParameter(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
        sock.listen(128)
        bound = sock.getsockname()[1]
        scheme = "https" if cert else "http"
        shown = f"[{host}]" if ":" in host else host
        if token is not None:
            print(f"demo: the Adult sample under epsilon 1; ledger {ledger} (deleted on exit)")
            print(f"demo: analyst token (an administrator): {token}")
            print(
                f"demo: curl -H 'Authorization: Bearer {token}' "
                "-H 'Content-Type: application/json' "
                f"-d '{{\"query\": \"age < 30\", \"epsilon\": 0.1}}' "
                f"{scheme}://{shown}:{bound}/v1/count"
            )
        print(f"listening on {scheme}://{shown}:{bound}", flush=True)
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        config = uvicorn.Config(
            app,
            log_level="warning",
            ssl_certfile=cert,
            ssl_keyfile=key,
            timeout_graceful_shutdown=5,
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        curator.close()
        if tmp is not None:
            tmp.cleanup()
    return 0
