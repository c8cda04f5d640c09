"""The key that chooses a privacy unit's rows is the ledger's: drawn once, sealed by its
hash chain, never shown; every later open keeps exactly the same rows, whatever the
file order; a bad data file creates no ledger."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from dpcurator.backends.unit_rows import choose_rows
from dpcurator.cli import main
from dpcurator.curator import Curator
from dpcurator.curator.ledger import Ledger
from dpcurator.errors import DataError, LedgerError
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.privacy import PureDP

SCHEMA = {"attributes": [{"name": "age", "type": "integer", "min": 0, "max": 99}]}


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"uid": rng.integers(0, 60, 1500), "age": rng.integers(0, 100, 1500)})
    df.to_csv(tmp_path / "d.csv", index=False)
    df.sort_values("age", ascending=False).to_csv(tmp_path / "sorted.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    return tmp_path, df


def histogram(path, schema, ledger, **kw):
    """The exact histogram of the kept rows (noise far below 1/2), and the ledger's key."""
    with Curator.open(
        path,
        schema,
        budget=PureDP(1e15),
        privacy_unit=("uid", 4),
        ledger=ledger,
        rng=SeededRandomSource(0),
        allow_insecure=True,
        **kw,
    ) as c:
        h = c.histogram("age", epsilon=1e12)
        return [int(v) for v in h.values()], c._ledger.unit_key


def kept(df, key, k=4, scheme=2):
    rows = [(str(u), [a]) for u, a in zip(df.uid, df.age, strict=True)]
    counts = Counter(code for (code,) in choose_rows(rows, k, key, scheme))
    return [counts.get(a, 0) for a in range(100)]


def rewrite_identity(ledger, change) -> bytes:
    """Rewrite an empty ledger's identity as ``change`` edits it (as an older dpcurator
    wrote it), its genesis and heads recomputed; the new genesis."""
    from dpcurator.curator.ledger_chain import FORMAT, analysts_genesis
    from dpcurator.curator.ledger_chain import genesis as genesis_of

    db = sqlite3.connect(ledger)
    (identity,) = db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
    ident = json.loads(identity)
    change(ident)
    old = json.dumps(ident, sort_keys=True)
    genesis = genesis_of(FORMAT, old)
    db.execute("DELETE FROM charges")
    for k, v in (
        ("identity", old),
        ("genesis", genesis.hex()),
        ("charges_head", f"0 {genesis.hex()}"),
        ("analysts_head", f"0 {analysts_genesis(genesis).hex()}"),
    ):
        db.execute("UPDATE meta SET value = ? WHERE key = ?", (v, k))
    db.commit()
    db.close()
    ledger.with_name(ledger.name + ".anchor").unlink()
    return genesis


def test_every_open_keeps_the_rows_the_ledger_chose(table):
    d, df = table
    ledger = d / "l.db"
    first, key = histogram(d / "d.csv", d / "s.json", ledger)
    assert len(key) == 32 and first == kept(df, key)
    again, key2 = histogram(d / "sorted.csv", d / "s.json", ledger)  # another file order
    assert key2 == key and again == first
    # the key is no part of what the ledger shows
    led = Ledger(ledger, create=False)
    try:
        assert "unit_key" not in led.identity
    finally:
        led.close()
    for argv in (["ledger", "show", str(ledger), "--json"], ["ledger", "head", str(ledger)]):
        assert main(argv) == 0
    raw = ledger.read_bytes()
    assert key.hex().encode() in raw  # kept in the store ...


def test_the_key_is_never_printed(table, capsys):
    d, _ = table
    ledger = d / "l.db"
    _, key = histogram(d / "d.csv", d / "s.json", ledger)
    capsys.readouterr()
    for argv in (
        ["ledger", "show", str(ledger), "--json"],
        ["ledger", "show", str(ledger)],
        ["ledger", "head", str(ledger), "--json"],
        ["ledger", "history", str(ledger), "--json"],
    ):
        assert main(argv) == 0
        out = capsys.readouterr()
        assert key.hex() not in out.out + out.err


def test_a_changed_key_is_refused(table):
    d, _ = table
    ledger = d / "l.db"
    _, key = histogram(d / "d.csv", d / "s.json", ledger)
    db = sqlite3.connect(ledger)
    (identity,) = db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
    forged = identity.replace(key.hex(), bytes(32).hex())
    assert forged != identity
    db.execute("UPDATE meta SET value = ? WHERE key = 'identity'", (forged,))
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match=r"identity .* was altered"):
        histogram(d / "d.csv", d / "s.json", ledger)


def test_a_key_given_makes_the_ledger_and_another_is_refused(table):
    d, df = table
    ledger = d / "l.db"
    mine = bytes(range(32))
    h, key = histogram(d / "d.csv", d / "s.json", ledger, unit_key=mine)
    assert key == mine and h == kept(df, mine)
    before = ledger.read_bytes()
    with pytest.raises(LedgerError, match="keeps another unit key") as err:
        histogram(d / "d.csv", d / "s.json", ledger, unit_key=bytes(32))
    assert mine.hex() not in str(err.value) and bytes(32).hex() not in str(err.value)
    assert ledger.read_bytes() == before
    h2, _ = histogram(d / "d.csv", d / "s.json", ledger, unit_key=mine)
    assert h2 == h


def test_a_file_that_does_not_load_creates_no_ledger(table):
    d, _ = table
    with pytest.raises(DataError):
        histogram(d / "missing.csv", d / "s.json", d / "new.db")
    assert not (d / "new.db").exists() and not (d / "new.db.anchor").exists()


def test_a_ledger_from_before_keys_were_kept_derives_one_from_its_genesis(table):
    """An empty ledger whose identity has no key (as every ledger written before): its
    key is SHA-256 of its genesis under a label, the same at every open; its rows are
    chosen by scheme 1, as they were then."""
    d, df = table
    ledger = d / "old.db"
    histogram(d / "d.csv", d / "s.json", ledger)

    def before_keys(ident: dict) -> None:
        del ident["unit_key"], ident["unit_rows"]

    genesis = rewrite_identity(ledger, before_keys)
    want = hashlib.sha256(b"dpcurator unit key\x00" + genesis).digest()
    h1, k1 = histogram(d / "d.csv", d / "s.json", ledger)
    h2, k2 = histogram(d / "sorted.csv", d / "s.json", ledger)
    assert k1 == k2 == want and h1 == h2 == kept(df, want, scheme=1)


def test_a_ledger_keeps_the_scheme_its_rows_were_chosen_with(tmp_path):
    """A new ledger seals scheme 2 with its key; one made before schemes were kept (a
    key, no scheme) keeps choosing by scheme 1 at every open, whatever the file order:
    its charges were made on those rows. The two schemes keep different rows here (a
    unit's copies of one row: scheme 1 ranked them alike)."""
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"uid": rng.integers(0, 30, 900), "age": rng.integers(0, 4, 900)})
    df.to_csv(tmp_path / "d.csv", index=False)
    df.sort_values("age").to_csv(tmp_path / "sorted.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    ledger = tmp_path / "l.db"
    now, key = histogram(tmp_path / "d.csv", tmp_path / "s.json", ledger)
    led = Ledger(ledger, create=False)
    try:
        assert led.unit_rows == 2 and "unit_rows" not in led.identity
    finally:
        led.close()
    assert now == kept(df, key, scheme=2) != kept(df, key, scheme=1)

    def before_schemes(ident: dict) -> None:
        assert ident["unit_rows"] == 2
        del ident["unit_rows"]

    rewrite_identity(ledger, before_schemes)
    for data in ("d.csv", "sorted.csv"):
        then, same = histogram(tmp_path / data, tmp_path / "s.json", ledger)
        assert same == key and then == kept(df, key, scheme=1)


def test_an_unknown_scheme_is_refused(table):
    d, _ = table
    ledger = d / "l.db"
    histogram(d / "d.csv", d / "s.json", ledger)
    rewrite_identity(ledger, lambda ident: ident.update(unit_rows=3))
    with pytest.raises(LedgerError, match="unit rows scheme 3 is unknown to this dpcurator"):
        histogram(d / "d.csv", d / "s.json", ledger)


@pytest.mark.parametrize("bad", ["2", True, 2.0, None, [2]])
def test_a_hand_written_scheme_of_another_type_is_refused(table, bad):
    """A ledger whose identity holds a scheme that is not the int 1 or 2 (written by
    hand, its genesis recomputed so that the chain verifies) is refused, not read as 2."""
    d, _ = table
    ledger = d / "l.db"
    histogram(d / "d.csv", d / "s.json", ledger)
    rewrite_identity(ledger, lambda ident: ident.update(unit_rows=bad))
    with pytest.raises(LedgerError, match=r"unit rows scheme .* is unknown to this dpcurator"):
        histogram(d / "d.csv", d / "s.json", ledger)
