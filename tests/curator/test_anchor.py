"""Rollback detection: the anchor outside the ledger's store, on both stores.

Each test that takes ``place`` runs once on a real SQLite file (its anchor beside it,
the default) and once on a schema of a real PostgreSQL server (its anchor a file given
explicitly, as a PostgreSQL ledger needs). The tampering is what anyone who can write
the store could do: delete rows and rewrite the head, or rewrite a charge and recompute
every later hash, the answers' seals and the head, with code that shares nothing with
dpcurator's but the documented formulas.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_places import Place

from dpcurator.curator.anchor import Anchor, parse
from dpcurator.curator.ledger import Ledger
from dpcurator.errors import LedgerError

IDENTITY = {"budget": "PureDP(1)", "currency": "epsilon", "amount": "1", "tables": {"t": {}}}


@pytest.fixture
def place(place: Place, tmp_path: Path) -> Place:
    """The conftest's place; a PostgreSQL one with an anchor file of its own."""
    if place.kind == "postgresql":
        place.anchor = tmp_path / f"{place.schema}.anchor"  # type: ignore[attr-defined]
    return place


def anchor_for(place: Place) -> Path | bool:
    """The anchor a curator on ``place`` uses: the default beside a file, else its own."""
    return getattr(place, "anchor", True)


def anchor_path(place: Place) -> Path:
    got = anchor_for(place)
    return Path(f"{place.target}.anchor") if got is True else got  # type: ignore[return-value]


def open_ledger(place: Place, identity: dict | None = IDENTITY, **kw: object) -> Ledger:
    return Ledger(place.target, identity, anchor=anchor_for(place), **kw)  # type: ignore[arg-type]


def charge(led: Ledger, i: int) -> int:
    with led.transaction():
        cid = led.insert_charge(
            analyst=None,
            table="t",
            kind="count",
            request=f"a < {i + 1}",
            coverage={"a": [[0, i + 1]]},
            cost=Fraction(1, 20),
            level=Fraction(1, 20) * (i + 1),
            noise="discrete_laplace(20)",
        )
    led.record_answer(cid, {f"a < {i + 1}": 100 + i})
    return cid


def make(place: Place, n: int = 8) -> Place:
    led = open_ledger(place)
    try:
        for i in range(n):
            charge(led, i)
    finally:
        led.close()
    return place


def refused(place: Place, match: str) -> str:
    with pytest.raises(LedgerError, match=match) as info:
        open_ledger(place, None).close()
    msg = str(info.value)
    assert "\n" not in msg and place.shown in msg and str(anchor_path(place)) in msg
    return msg


def rechain(place: Place, cid: int, cost: str) -> None:
    """Give charge ``cid`` another cost and recompute every hash from it on (and the
    answers' seals and the head), so that the chain verifies on its own."""
    ((genesis,),) = place.query("SELECT value FROM meta WHERE key = 'genesis'")
    rows = place.query(
        "SELECT id, created, analyst, table_name, kind, request, coverage, cost, level, "
        "noise, answer FROM charges ORDER BY id"
    )
    prev = bytes.fromhex(genesis)
    updates = []
    for r in rows:
        fields = list(r[:10])
        if r[0] == cid:
            fields[7] = cost
        encoded = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()
        h = hashlib.sha256(prev + encoded).digest()
        seal = None if r[10] is None else hashlib.sha256(b"answer\0" + h + r[10].encode())
        updates.append(
            f"UPDATE charges SET cost = '{fields[7]}', hash = '{h.hex()}', answer_hash = "
            + ("NULL" if seal is None else f"'{seal.hexdigest()}'")
            + f" WHERE id = {r[0]}"
        )
        prev = h
    place.tamper(
        *updates, f"UPDATE meta SET value = '{len(rows)} {prev.hex()}' WHERE key = 'charges_head'"
    )


# --- rollbacks --------------------------------------------------------------------------


def test_deleting_the_newest_half_and_rewriting_the_head_is_refused(place):
    make(place, 8)
    place.roll_back(4)
    msg = refused(place, "rolled back: it holds 4 charges, but its anchor .* records charge 8")
    assert "restore a backup that holds charge 8" in msg
    # a curator (with the data's identity) is refused the same way, and writes nothing
    with pytest.raises(LedgerError, match="rolled back"):
        open_ledger(place).close()
    assert place.query("SELECT count(*) FROM charges") == [(4,)]
    assert parse(anchor_path(place).read_bytes().splitlines()[-1]).charges == 8


def test_deleting_every_charge_and_resetting_the_head_to_genesis_is_refused(place):
    make(place, 5)
    place.roll_back(0)
    refused(place, "rolled back: it holds 0 charges, but its anchor .* records charge 5")


def test_a_chain_rewritten_from_an_old_charge_with_every_later_hash_is_refused(place):
    make(place, 6)
    rechain(place, 2, "1/1000")
    led = Ledger(place.target, None, anchor=None)  # the chain alone verifies: a full rewrite
    assert led.head[0] == 6
    led.close()
    refused(place, r"its charge 6 is not the one its anchor .* records .*rewritten or replaced")


def test_a_rollback_then_a_new_charge_is_refused(place):
    """Rolled back, then charged again to the same length: the hashes differ."""
    make(place, 6)
    place.roll_back(3)
    led = Ledger(place.target, IDENTITY, anchor=None)  # a curator without the anchor
    for i in range(3):
        charge(led, 10 + i)
    led.close()
    refused(place, "its charge 6 is not the one its anchor")


def test_a_rolled_back_analysts_chain_is_refused(place):
    """A revocation (or a lowered quota) removed again hands a token or budget back."""
    make(place, 2)
    led = open_ledger(place)
    token = led.add_credential("mallory")
    led.revoke("mallory")
    led.close()
    ((seq,),) = place.query("SELECT max(seq) FROM analysts")
    prev = place.query(f"SELECT seq, hash FROM analysts WHERE seq = {seq - 1}")[0]
    place.tamper(
        f"DELETE FROM analysts WHERE seq = {seq}",
        f"UPDATE meta SET value = '{prev[0]} {prev[1]}' WHERE key = 'analysts_head'",
    )
    other = Ledger(place.target, None, anchor=None)  # without the anchor, the token works again
    assert other.authenticate(token) is not None
    other.close()
    refused(
        place, f"rolled back: it holds {seq - 1} analyst entries, but its anchor .* entry {seq}"
    )


def test_a_revocation_anchored_by_another_process_survives_a_stale_committer(place):
    """A curator that has not re-read the analysts since another process revoked one
    anchors its next charge with the older analysts head: the anchor's line for that
    charge is further in one chain and behind in the other. Each chain's furthest head
    is checked on its own, so removing the revocation is still refused."""
    make(place, 1)
    stale = open_ledger(place)
    try:
        other = open_ledger(place)
        token = other.add_credential("mallory")
        other.revoke("mallory")
        other.close()
        charge(stale, 1)  # its line: charge 2, the analysts' head it last read
    finally:
        stale.close()
    ((seq,),) = place.query("SELECT max(seq) FROM analysts")
    prev = place.query(f"SELECT seq, hash FROM analysts WHERE seq = {seq - 1}")[0]
    place.tamper(
        f"DELETE FROM analysts WHERE seq = {seq}",
        f"UPDATE meta SET value = '{prev[0]} {prev[1]}' WHERE key = 'analysts_head'",
    )
    other = Ledger(place.target, None, anchor=None)
    assert other.authenticate(token) is not None  # the token would work again
    other.close()
    refused(place, f"rolled back: it holds {seq - 1} analyst entries, but its anchor")


def test_an_anchor_that_is_no_regular_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "l.db.anchor"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(LedgerError, match="not a regular file"):
        Ledger(tmp_path / "l.db", IDENTITY, anchor=fifo).close()
    assert time.monotonic() - t0 < 5  # it used to wait for a writer, forever


def test_the_anchor_of_another_ledger_is_refused(stores, tmp_path):
    a, b = stores.new("a"), stores.new("b")
    if stores.kind == "postgresql":
        a.anchor = tmp_path / "a.anchor"  # type: ignore[attr-defined]
    make(a, 3)
    Ledger(b.target, {**IDENTITY, "amount": "2"}, anchor=tmp_path / "b.anchor").close()
    with pytest.raises(LedgerError, match="records another ledger") as info:
        Ledger(b.target, None, anchor=anchor_path(a))
    assert "\n" not in str(info.value)
    # the same budget and schemas, but another ledger: its chain is not the anchored one
    c = stores.new("c")
    Ledger(c.target, IDENTITY, anchor=tmp_path / "c.anchor").close()
    with pytest.raises(LedgerError, match="rolled back: it holds 0 charges"):
        Ledger(c.target, None, anchor=anchor_path(a))


def test_a_ledger_file_deleted_and_created_again_is_refused(tmp_path):
    place = make(Place("sqlite", str(tmp_path / "l.db"), str(tmp_path / "l.db")), 3)
    os.unlink(place.target)
    with pytest.raises(LedgerError, match="rolled back: it holds 0 charges"):
        Ledger(place.target, IDENTITY)  # created afresh, then refused: the budget is not reset


# --- what is accepted ---------------------------------------------------------------------


def test_a_ledger_ahead_of_its_anchor_is_accepted_and_anchored_by_a_curator(place):
    """A crash between a commit and its anchor, or a ledger without an anchor yet (the
    way from earlier versions): accepted; read-only opens write nothing."""
    led = Ledger(place.target, IDENTITY, anchor=None)
    for i in range(4):
        charge(led, i)
    led.close()
    path = anchor_path(place)
    assert not path.exists()
    reader = open_ledger(place, None)
    assert not reader.anchor_started and reader.anchor == str(path)
    reader.close()
    assert not path.exists()  # reading never writes the anchor
    led = open_ledger(place)
    assert led.anchor_started
    led.close()
    assert parse(path.read_bytes().splitlines()[-1]).charges == 4
    led = open_ledger(place)
    assert not led.anchor_started
    charge(led, 9)
    assert led.anchored().charges == 5
    led.close()


def test_a_torn_last_line_is_ignored_and_ended_by_the_next_append(place):
    make(place, 3)
    path = anchor_path(place)
    whole = path.read_bytes()
    last = whole.splitlines()[-1]
    # a crash mid-append: a partial entry, and one that would parse but has no newline
    for torn in (last[:40], last):  # cut inside the entry, or just before its newline
        path.write_bytes(whole + torn)
        led = open_ledger(place)
        assert led.anchored().charges == 3
        charge(led, 7)
        led.close()
        data = path.read_bytes()
        assert data.endswith(b"\n") and torn + b"\n" in data
        assert parse(data.splitlines()[-1]).charges == 4
        place.roll_back(3)  # undo for the next round (and prove it is caught)
        refused(place, "rolled back")
        path.write_bytes(whole)


def test_the_anchor_file_holds_whole_lines_of_both_heads(place):
    make(place, 2)
    led = open_ledger(place)
    led.register_analyst("ann")
    heads = led.heads
    led.close()
    lines = anchor_path(place).read_bytes().splitlines()
    assert parse(lines[-1]) == heads
    assert all(parse(x) is not None for x in lines)
    assert heads.charges == 2 and heads.analysts == 1


def test_an_anchor_that_cannot_be_written_withholds_the_answer(tmp_path):
    """The commit is kept (the charge counts), but nothing is answered past it."""
    place = make(Place("sqlite", str(tmp_path / "l.db"), str(tmp_path / "l.db")), 1)
    led = open_ledger(place)
    path = anchor_path(place)
    path.unlink()
    path.mkdir()  # what the process finds there is not a file it can append to
    try:
        for i in (5, 6):
            with pytest.raises(LedgerError, match=r"anchor .* cannot be written"):
                charge(led, i)
        # the first was committed; the second was refused before anything was written
        assert place.query("SELECT count(*) FROM charges") == [(2,)]
    finally:
        led.close()
        path.rmdir()


def test_appenders_sharing_one_anchor_take_the_furthest_entry(tmp_path):
    a = Anchor(tmp_path / "x.anchor")
    from dpcurator.curator.anchor import Heads

    g = "0" * 64
    a.append(Heads(5, "a" * 64, 1, "b" * 64, g))
    with open(tmp_path / "x.anchor", "ab") as f:  # another process, finished earlier
        f.write(Heads(4, "c" * 64, 1, "b" * 64, g).line())
    assert Anchor(tmp_path / "x.anchor").latest().charges == 5
    a.close()


# --- a ledger in use -------------------------------------------------------------------


def test_a_running_process_detects_an_old_row_changed_under_it_within_the_bound(place):
    """The hash of an old row, changed while a process holds the ledger open, is found by
    its re-verification (every 0.3 s here), after which it charges nothing more."""
    make(place, 6)
    led = open_ledger(place, verify_every=0.3)
    try:
        charge(led, 6)
        place.tamper("UPDATE charges SET cost = '1/1000' WHERE id = 2")
        began = time.monotonic()
        while time.monotonic() - began < 20:
            try:
                charge(led, 7)
            except LedgerError as err:
                assert "charge 2 was altered" in str(err) and "re-verifying" in str(err)
                break
            time.sleep(0.05)
        else:
            pytest.fail("the change was not found")
        assert time.monotonic() - began < 10  # the bound is 0.3 s: generous slack
        n = place.query("SELECT count(*) FROM charges")[0][0]
        with pytest.raises(LedgerError, match="re-verifying"):
            charge(led, 8)
        with pytest.raises(LedgerError, match="re-verifying"):
            led.charges_after(0)
        assert place.query("SELECT count(*) FROM charges")[0][0] == n
    finally:
        led.close()


def test_a_running_process_detects_a_rollback_and_rewrite_of_what_it_verified(place):
    make(place, 6)
    led = open_ledger(place, verify_every=0.3)
    try:
        rechain(place, 1, "1/1000")  # every hash and the head recomputed
        anchor_path(place).write_bytes(b"")  # and even the anchor emptied
        began = time.monotonic()
        while led._failure is None and time.monotonic() - began < 20:
            time.sleep(0.05)
        assert led._failure is not None
        assert "this process verified earlier" in str(led._failure)
        with pytest.raises(LedgerError, match="re-verifying"):
            charge(led, 9)
    finally:
        led.close()


def test_the_re_verification_anchors_what_others_committed(place):
    make(place, 2)
    watcher = open_ledger(place, None, verify_every=0.2)
    other_anchor = anchor_path(place).with_name("other.anchor")
    writer = Ledger(place.target, IDENTITY, anchor=other_anchor)  # another host's anchor
    for i in range(3):
        charge(writer, i)
    writer.close()
    try:
        began = time.monotonic()
        while watcher.anchored().charges < 5 and time.monotonic() - began < 20:
            time.sleep(0.05)
        assert watcher.anchored().charges == 5 and watcher._failure is None
    finally:
        watcher.close()


def test_verify_checks_the_anchor_too(place):
    make(place, 4)
    led = open_ledger(place, None)
    try:
        assert led.verify() == 4
        place.roll_back(2)
        with pytest.raises(LedgerError, match="rolled back"):
            led.verify()
    finally:
        led.close()


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path):
    from dpcurator.errors import InvalidParameter

    for kw in ({"verify_every": 0}, {"verify_every": True}, {"anchor": 3}, {"anchor": ""}):
        with pytest.raises(InvalidParameter):
            Ledger(tmp_path / "l.db", IDENTITY, **kw)
    with pytest.raises(InvalidParameter, match="durable ledger"):
        Ledger(None, IDENTITY, anchor=tmp_path / "a.anchor")
    assert list(tmp_path.iterdir()) == []
