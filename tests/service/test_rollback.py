"""Rollback detection end to end: real ``dpcurator serve`` processes, the real CLI, an
SQLite file (its anchor beside it) and a schema of a real PostgreSQL server (its anchor a
file given with ``--anchor``).

A ledger is written by a server answering counts over HTTP; then someone with write
access to the store deletes the newest half of the charges and rewrites the head, which
leaves a chain that verifies on its own. ``dpcurator ledger show``, ``ledger head`` and
``serve`` must refuse it, each with one line naming the anchor; a server must find an old
row changed under it within its re-verification bound, and then charge nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ledger_places import Place

from dpcurator.curator.ledger import Ledger

from .conftest import FAST, assert_error, charges_in, cli, running, start_server, write_people


def anchor_args(place: Place, tmp_path: Path) -> tuple[list[object], Path]:
    """The flags a command on ``place`` takes for its anchor, and the anchor file."""
    if place.kind == "sqlite":
        return [], Path(f"{place.target}.anchor")
    anchor = tmp_path / "pg.anchor"
    return ["--anchor", anchor], anchor


def served(stores, tmp_path: Path, n: int = 8) -> tuple[Place, list[object], Path, tuple]:
    """A ledger that a real server wrote: ``n`` counts answered to analyst alice."""
    place = stores.new()
    flags, anchor = anchor_args(place, tmp_path)
    data = write_people(tmp_path)
    with running(tmp_path / "first", *flags, data=data, ledger=place.target, config=FAST) as s:
        s.add("alice", *flags)
        with s.http("alice") as c:
            for i in range(n):
                r = c.post("/v1/count", json={"query": f"age < {10 + i}", "epsilon": 0.5})
                assert r.status_code == 200, r.text
    assert charges_in(place.target) == n
    return place, flags, anchor, data


def one_line(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)


def test_a_rolled_back_ledger_is_refused_by_show_head_and_serve(stores, tmp_path):
    place, flags, anchor, data = served(stores, tmp_path)
    code, out, err = cli("ledger", "head", place.target, "--json", *flags)
    assert code == 0, err
    head = json.loads(out)
    assert head["status"] == "equal" and head["agrees"] and head["anchor"] == str(anchor)
    assert head["charges"] == head["anchored"]["charges"] == 8

    place.roll_back(4)  # the newest half deleted, the head rewritten: the chain still verifies
    assert Ledger(place.target, None, anchor=None).head[0] == 4

    code, out, err = cli("ledger", "show", place.target, *flags)
    assert code == 2 and out == ""
    one_line(err, "rolled back: it holds 4 charges", str(anchor), "records charge 8")
    code, out, err = cli("ledger", "head", place.target, "--json", *flags)
    assert code == 2
    head = json.loads(out)
    assert head["status"] == "refused" and not head["agrees"] and head["charges"] == 4
    one_line(err, "rolled back")
    code, out, err = cli("ledger", "head", place.target, *flags)
    assert code == 2 and "REFUSED" in out
    with pytest.raises(RuntimeError, match=r"exited \(2\)") as info:
        start_server(tmp_path / "again", *flags, data=data, ledger=place.target)
    one_line(str(info.value).split(": ", 1)[1], "rolled back: it holds 4 charges", str(anchor))
    assert charges_in(place.target) == 4  # nothing was written by the refusals

    place.roll_back(0)  # every charge deleted, the head reset to the genesis
    code, _, err = cli("ledger", "show", place.target, *flags)
    assert code == 2
    one_line(err, "rolled back: it holds 0 charges")


def test_a_postgresql_server_needs_an_anchor(postgres_stores, tmp_path):
    place = postgres_stores.new()
    data, schema = write_people(tmp_path)
    cmd = [sys.executable, "-m", "dpcurator.cli", "serve", "--port", "0", "--ledger"]
    done = subprocess.run(
        [*cmd, place.target, "--data", data, "--schema", schema, "--epsilon", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    one_line(done.stderr, "needs --anchor FILE", "[ledger] anchor")
    assert place.query(
        f"SELECT count(*) FROM information_schema.schemata WHERE schema_name = '{place.schema}'"
    ) == [(0,)]  # refused before anything was created


def test_a_server_finds_an_old_row_changed_under_it_and_charges_nothing_more(stores, tmp_path):
    place = stores.new()
    flags, _ = anchor_args(place, tmp_path)
    config = FAST + "[ledger]\nverify_every = 0.5\n"
    with running(tmp_path / "s", *flags, ledger=place.target, config=config) as s:
        s.add("alice", *flags)
        with s.http("alice") as c:
            for q in ("age < 20", "age < 30"):
                assert c.post("/v1/count", json={"query": q, "epsilon": 0.5}).status_code == 200
            place.tamper("UPDATE charges SET cost = '1/1000' WHERE id = 1")
            began = time.monotonic()
            while time.monotonic() - began < 30:
                r = c.post("/v1/count", json={"query": "age < 40", "epsilon": 0.01})
                if r.status_code != 200:
                    break
                time.sleep(0.1)
            assert_error(r, 503, "ledger_unavailable")
            assert time.monotonic() - began < 15  # the bound is 0.5 s: generous slack
            n = charges_in(place.target)
            for _ in range(3):
                r = c.post("/v1/count", json={"query": "age < 50", "epsilon": 0.01})
                assert_error(r, 503, "ledger_unavailable")
            assert charges_in(place.target) == n
        deadline = time.monotonic() + 10
        while "re-verifying" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = s.log()
        assert "charge 1 was altered" in log and "re-verifying the ledger in use" in log
        assert "Traceback" not in log


def test_a_ledger_without_an_anchor_yet_is_anchored_by_the_server_with_a_note(tmp_path):
    """The way from a ledger written before anchors existed."""
    from ledger_places import Stores

    place, _, anchor, data = served(Stores("sqlite", tmp_path, None), tmp_path, n=3)
    anchor.unlink()
    with running(tmp_path / "again", data=data, ledger=place.target) as s:
        assert anchor.exists()
    assert "had no entry; it now records the ledger's heads (3 charges)" in s.log()
    code, out, _ = cli("ledger", "head", place.target, "--json")
    assert code == 0 and json.loads(out)["anchored"]["charges"] == 3
