"""``dpcurator ledger`` and ``dpcurator analysts`` on a PostgreSQL ledger: the same
output as on the SQLite file it was copied from; ``ledger copy`` both ways; backups to a
file; passwords never printed. A real server (see tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from curator.conftest import SCHEMA

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.curator.ledger import Ledger
from dpcurator.privacy import PureDP

pytestmark = pytest.mark.usefixtures("postgres_url")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def with_password(url: str) -> str:
    return url.replace("postgresql://dpc@", "postgresql://dpc:s3cret@", 1)


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Path:
    import numpy as np

    rng = np.random.default_rng(3)
    data = tmp_path / "people.csv"
    lines = ["age,sex,region"] + [
        f"{rng.integers(0, 100)},{rng.choice(['F', 'M'])},"
        f"{rng.choice(['north', 'south', 'east', 'west'])}"
        for _ in range(300)
    ]
    data.write_text("\n".join(lines) + "\n")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    path = tmp_path / "l.db"
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=path) as c:
        c.count("age < 30", epsilon=0.3)
        c.add_analyst("bob", quota=0.25)
        c.analyst("alice", quota=0.5).histogram("sex", epsilon=0.1)
        c.analyst("bob").count("region = 'north'", epsilon=0.05)
    return path


def test_copy_to_postgresql_reads_the_same_and_copies_back(sqlite_ledger, postgres_stores, capsys):
    pg = postgres_stores.new()
    url = with_password(pg.target)
    code, out, err = run(capsys, "ledger", "copy", sqlite_ledger, url)
    assert code == 0 and err == "", err
    assert out.startswith(f"copied {sqlite_ledger} to {pg.shown}: 3 charges, 2 analysts, verified")
    assert "s3cret" not in out
    for action in (["show"], ["history"], ["analysts"], ["show", "--query", "age < 50"]):
        a = run(capsys, "ledger", action[0], sqlite_ledger, *action[1:], "--json")
        b = run(capsys, "ledger", action[0], url, *action[1:], "--json")
        assert a[0] == b[0] == 0, (a, b)
        da, db = json.loads(a[1]), json.loads(b[1])
        if isinstance(da, dict):
            assert (da.pop("ledger"), db.pop("ledger")) == (str(sqlite_ledger), pg.shown)
        assert da == db
    code, out, _ = run(capsys, "ledger", "show", url)
    assert code == 0 and f"ledger:     {pg.shown} (verified: 3 charges, 2 analysts)" in out
    assert "s3cret" not in out
    back = sqlite_ledger.with_name("back.db")
    code, out, err = run(capsys, "ledger", "copy", url, back)
    assert code == 0, err
    code, out, err = run(capsys, "ledger", "backup", url, sqlite_ledger.with_name("b.db"))
    assert code == 0 and out.startswith(f"backed up {pg.shown} to ")
    heads = {
        Ledger(str(p), None).head for p in (sqlite_ledger, back, sqlite_ledger.with_name("b.db"))
    }
    assert heads == {Ledger(pg.target, None).head}


def test_copy_refuses_to_overwrite_without_force(sqlite_ledger, postgres_stores, capsys):
    pg = postgres_stores.new()
    assert run(capsys, "ledger", "copy", sqlite_ledger, pg.target)[0] == 0
    code, out, err = run(capsys, "ledger", "copy", sqlite_ledger, pg.target)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "holds a ledger; refusing to overwrite it (pass --force to replace it)" in err
    code, _, err = run(capsys, "ledger", "copy", pg.target, sqlite_ledger)
    assert code == 2 and "the file exists; pass --force" in err
    assert run(capsys, "ledger", "copy", sqlite_ledger, pg.target, "--force")[0] == 0
    code, _, err = run(capsys, "ledger", "backup", sqlite_ledger, pg.target)
    assert code == 2 and "a backup is a file" in err


def test_errors_name_the_ledger_without_its_password(postgres_stores, capsys):
    pg = postgres_stores.new()
    url = with_password(pg.target)
    for argv in (["ledger", "show", url], ["analysts", "list", "--ledger", url]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "no ledger there" in err and pg.shown in err and "s3cret" not in err


def test_analysts_on_a_postgresql_ledger(sqlite_ledger, postgres_stores, capsys):
    pg = postgres_stores.new()
    assert run(capsys, "ledger", "copy", sqlite_ledger, pg.target)[0] == 0
    code, out, err = run(capsys, "analysts", "add", "carol", "--ledger", pg.target, "--json")
    assert code == 0, err
    token = json.loads(out)["token"]
    led = Ledger(pg.target, None)
    assert led.authenticate(token).name == "carol"
    code, out, _ = run(capsys, "analysts", "list", "--ledger", pg.target, "--json")
    assert [r["name"] for r in json.loads(out)] == ["alice", "bob", "carol"]
    assert run(capsys, "analysts", "revoke", "carol", "--ledger", pg.target)[0] == 0
    assert led.authenticate(token) is None
    led.close()
