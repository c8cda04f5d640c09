"""``dpcurator analysts add|list|revoke``: tokens, quotas and roles in the ledger file."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.cli import main
from dpcurator.curator.ledger import Ledger

IDENTITY = {"budget": "PureDP(1)", "currency": "epsilon", "amount": "1", "tables": {"t": {}}}
TOKEN = re.compile(r"dpc_[0-9a-f]{16}_[A-Za-z0-9_-]{43}")


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["analysts", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def ledger(path: Path, identity: dict | None = None) -> Path:
    Ledger(path, identity or IDENTITY).close()
    return path


def one_error_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith("dpcurator analysts: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def who(path: Path, token: str):
    led = Ledger(path, None, create=False)
    try:
        return led.authenticate(token)
    finally:
        led.close()


def test_add_prints_the_token_as_the_last_line(tmp_path, capsys) -> None:
    path = ledger(tmp_path / "l.db")
    code, out, err = run(capsys, "add", "ann", "--ledger", path)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "ann" in lines[0] and "shown once" in lines[0]
    assert TOKEN.fullmatch(lines[-1])
    p = who(path, lines[-1])
    assert p is not None and p.name == "ann" and p.admin is False


def test_add_json(tmp_path, capsys) -> None:
    path = ledger(tmp_path / "l.db")
    code, out, _ = run(capsys, "add", "root", "--ledger", path, "--admin", "--json")
    assert code == 0 and out.count("\n") == 1
    d = json.loads(out)
    assert set(d) == {"name", "token"} and d["name"] == "root" and TOKEN.fullmatch(d["token"])
    assert who(path, d["token"]).admin is True


def test_the_ledger_keeps_only_a_hash_of_the_token(tmp_path, capsys) -> None:
    path = ledger(tmp_path / "l.db")
    _, out, _ = run(capsys, "add", "ann", "--ledger", path, "--json")
    token = json.loads(out)["token"]
    secret = token.split("_", 2)[2]
    assert secret.encode() not in path.read_bytes()
    db = sqlite3.connect(path)
    assert all(secret not in str(row) for row in db.execute("SELECT * FROM analysts"))
    db.close()


def test_list_shows_quotas_roles_and_status(tmp_path, capsys) -> None:
    path = ledger(tmp_path / "l.db")
    run(capsys, "add", "ann", "--ledger", path, "--quota", "0.25")
    run(capsys, "add", "root", "--ledger", path, "--admin")
    run(capsys, "add", "zed", "--ledger", path)
    run(capsys, "revoke", "zed", "--ledger", path)
    code, out, _ = run(capsys, "list", "--ledger", path, "--json")
    assert code == 0
    assert json.loads(out) == [
        {"name": "ann", "quota": 0.25, "admin": False, "active": True},
        {"name": "root", "quota": None, "admin": True, "active": True},
        {"name": "zed", "quota": None, "admin": False, "active": False},
    ]
    code, out, _ = run(capsys, "list", "--ledger", path)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4 and lines[0].split() == ["name", "quota", "role", "status"]
    assert lines[1].split() == ["ann", "0.25", "analyst", "active"]
    assert lines[2].split() == ["root", "-", "administrator", "active"]
    assert lines[3].split() == ["zed", "-", "analyst", "no", "token"]


def test_a_gaussian_budget_quota_is_listed_as_given(tmp_path, capsys) -> None:
    identity = {**IDENTITY, "budget": "GDP(mu=1)", "currency": "mu"}
    path = ledger(tmp_path / "l.db", identity)
    run(capsys, "add", "ann", "--ledger", path, "--quota", "0.5")
    led = Ledger(path, None, create=False)
    assert led.quota("ann") == Fraction(1, 4)  # kept in mu^2, the additive unit
    led.close()
    _, out, _ = run(capsys, "list", "--ledger", path, "--json")
    assert json.loads(out)[0]["quota"] == 0.5


def test_revoke_and_add_again(tmp_path, capsys) -> None:
    path = ledger(tmp_path / "l.db")
    _, out, _ = run(capsys, "add", "ann", "--ledger", path, "--quota", "0.5", "--json")
    first = json.loads(out)["token"]
    code, out, err = run(capsys, "revoke", "ann", "--ledger", path)
    assert code == 0 and err == "" and out.strip() == "revoked 'ann': their token no longer works"
    assert who(path, first) is None
    _, out, _ = run(capsys, "add", "ann", "--ledger", path, "--json")
    second = json.loads(out)["token"]
    assert second != first and who(path, second).name == "ann" and who(path, first) is None
    _, out, _ = run(capsys, "list", "--ledger", path, "--json")
    assert json.loads(out)[0]["quota"] == 0.5  # the quota stays through a new token
    # a new token replaces the old one
    _, out, _ = run(capsys, "add", "ann", "--ledger", path, "--json")
    assert who(path, second) is None and who(path, json.loads(out)["token"]).name == "ann"
    # revoking an administrator takes the role away too
    run(capsys, "add", "root", "--ledger", path, "--admin")
    run(capsys, "revoke", "root", "--ledger", path)
    _, out, _ = run(capsys, "list", "--ledger", path, "--json")
    assert {r["name"]: r["admin"] for r in json.loads(out)}["root"] is False


@pytest.mark.parametrize("action", ["add ann", "list", "revoke ann"])
def test_a_missing_ledger_file(tmp_path, capsys, action: str) -> None:
    code, out, err = run(capsys, *action.split(), "--ledger", tmp_path / "none.db")
    assert code == 2 and out == ""
    one_error_line(err, "none.db", "no such file")
    assert not (tmp_path / "none.db").exists()  # never created by this command


@pytest.mark.parametrize("action", ["add ann", "list", "revoke ann"])
def test_not_a_ledger(tmp_path, capsys, action: str) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    code, out, err = run(capsys, *action.split(), "--ledger", text)
    assert code == 2 and out == ""
    one_error_line(err, "not a dpcurator ledger")
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE things (x)")
    db.commit()
    db.close()
    code, _, err = run(capsys, *action.split(), "--ledger", other)
    assert code == 2
    one_error_line(err, "not a dpcurator ledger", "things")
    code, _, err = run(capsys, *action.split(), "--ledger", tmp_path)
    assert code == 2
    one_error_line(err, "directory")


def test_revoke_an_unknown_analyst(tmp_path, capsys) -> None:
    path = ledger(tmp_path / "l.db")
    code, out, err = run(capsys, "revoke", "nobody", "--ledger", path)
    assert code == 2 and out == ""
    one_error_line(err, "no analyst 'nobody'")


@pytest.mark.parametrize(
    ("quota", "words"),
    [("0", "quota"), ("-1", "quota"), ("nan", "quota"), ("inf", "quota")],
)
def test_bad_quotas(tmp_path, capsys, quota: str, words: str) -> None:
    path = ledger(tmp_path / "l.db")
    code, out, err = run(capsys, "add", "ann", "--ledger", path, f"--quota={quota}")
    assert code == 2 and out == ""
    one_error_line(err, words)
    _, out, _ = run(capsys, "list", "--ledger", path, "--json")
    assert json.loads(out) == []


@pytest.mark.parametrize("name", ["", "   ", "a\nb", "tab\there", "x" * 201])
def test_bad_names_are_refused_as_over_http(tmp_path, capsys, name: str) -> None:
    path = ledger(tmp_path / "l.db")
    code, out, err = run(capsys, "add", name, "--ledger", path)
    assert code == 2 and out == ""
    one_error_line(err, "name")
    _, out, _ = run(capsys, "list", "--ledger", path, "--json")
    assert json.loads(out) == []


def test_usage_errors_exit_2(tmp_path, capsys) -> None:
    for argv in (["add", "ann"], ["list"], ["frobnicate"], ["add", "ann", "--quota", "x"]):
        try:  # argparse's errors, or a missing ledger (LEDGER or --ledger): exit status 2
            code = main(
                [
                    "analysts",
                    *argv,
                    *(["--ledger", str(tmp_path / "l.db")] if argv[0] == "frobnicate" else []),
                ]
            )
        except SystemExit as e:
            code = e.code
        assert code == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_as_a_command_no_traceback(tmp_path) -> None:
    path = ledger(tmp_path / "l.db")
    cmd = [sys.executable, "-m", "dpcurator.cli", "analysts"]
    done = subprocess.run(
        [*cmd, "revoke", "ghost", "--ledger", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""
    one_error_line(done.stderr, "ghost")
    done = subprocess.run(
        [*cmd, "add", "ann", "--ledger", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert TOKEN.fullmatch(json.loads(done.stdout.splitlines()[-1])["token"])
