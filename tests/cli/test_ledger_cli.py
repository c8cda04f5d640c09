"""``dpcurator ledger backup``: verified live copies, one-line errors with exit status 2."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.cli import main
from dpcurator.curator.ledger import Ledger

IDENTITY = {"budget": "PureDP(1)", "currency": "epsilon", "amount": "1", "tables": {"t": {}}}


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["ledger", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def make(path: Path, n: int = 4) -> Path:
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(1, 2))
    for i in range(n):
        with led.transaction():
            cid = led.insert_charge(
                analyst="alice",
                table="t",
                kind="count",
                request=f"a < {i + 1}",
                coverage={"a": [[0, i + 1]]},
                cost=Fraction(1, 10),
                level=Fraction(i + 1, 10),
                noise="discrete_laplace(10)",
            )
        led.record_answer(cid, {f"a < {i + 1}": i})
    led.close()
    return path


def one_error_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith("dpcurator ledger: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def test_backup_copies_and_verifies(tmp_path, capsys):
    src, dst = make(tmp_path / "l.db"), tmp_path / "copy.db"
    code, out, err = run(capsys, "backup", src, dst)
    assert code == 0 and err == ""
    assert out.count("\n") == 1 and "4 charges, 1 analysts, verified" in out
    led = Ledger(dst, IDENTITY)
    assert led.verify() == 4 and led.quota("alice") == Fraction(1, 2)
    assert [r.answer for r in led.charges_after(0)][-1] == {"a < 4": 3}


def test_backup_refuses_an_existing_target_unless_forced(tmp_path, capsys):
    src, dst = make(tmp_path / "l.db"), tmp_path / "copy.db"
    dst.write_text("keep me")
    code, out, err = run(capsys, "backup", src, dst)
    assert code == 2 and out == ""
    one_error_line(err, str(dst), "--force")
    assert dst.read_text() == "keep me"
    code, out, err = run(capsys, "backup", src, dst, "--force")
    assert code == 0, err
    assert Ledger(dst, IDENTITY).verify() == 4


def test_backup_refuses_a_tampered_source(tmp_path, capsys):
    src, dst = make(tmp_path / "l.db"), tmp_path / "copy.db"
    con = sqlite3.connect(src)
    con.execute("DELETE FROM charges WHERE id = 2")
    con.commit()
    con.close()
    code, _, err = run(capsys, "backup", src, dst)
    assert code == 2 and not dst.exists()
    one_error_line(err, str(src), "charge 2 was removed", "hash chain broken")


@pytest.mark.parametrize("content", [None, b"", b"not a database at all, just text"])
def test_backup_refuses_what_is_not_a_ledger(tmp_path, capsys, content):
    src, dst = tmp_path / "l.db", tmp_path / "copy.db"
    if content is not None:
        src.write_bytes(content)
    code, _, err = run(capsys, "backup", src, dst)
    assert code == 2 and not dst.exists()
    one_error_line(err, str(src))
    if content is None:
        assert not src.exists()  # verifying never creates a ledger


def test_backup_into_a_missing_directory_is_one_line(tmp_path, capsys):
    src = make(tmp_path / "l.db")
    code, _, err = run(capsys, "backup", src, tmp_path / "no" / "such" / "copy.db")
    assert code == 2
    one_error_line(err)


def test_ledger_needs_an_action(capsys):
    with pytest.raises(SystemExit) as info:
        main(["ledger"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ledger" in err


WRITER = """
import sys
from fractions import Fraction
from dpcurator.curator.ledger import Ledger
led = Ledger(sys.argv[1], {identity})
for i in range(100_000):
    with led.transaction():
        cid = led.insert_charge(analyst=None, table="t", kind="count", request="a < 1",
            coverage={{"a": [[0, 1]]}}, cost=Fraction(1, 10**6), level=Fraction(i + 1, 10**6),
            noise="n")
    print(cid, flush=True)
"""


def test_the_command_backs_up_a_ledger_being_written(tmp_path):
    """The real command, in its own process, while another process keeps charging."""
    src, dst = tmp_path / "l.db", tmp_path / "copy.db"
    w = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(identity=json.dumps(IDENTITY)), str(src)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        committed = 0
        while committed < 30:
            committed = int(w.stdout.readline())
        p = subprocess.run(
            [sys.executable, "-m", "dpcurator.cli", "ledger", "backup", str(src), str(dst)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        w.kill()
        w.wait(timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"backed up {src} to {dst}: ")
    assert Ledger(dst, IDENTITY).verify() >= committed


def test_no_ledger_command_leaves_a_journal_file(tmp_path: Path, capsys) -> None:
    root = Path(__file__).resolve().parents[2]
    ledger = tmp_path / "l.db"
    commands = [
        [
            "answer",
            "--data",
            root / "examples" / "data" / "adult-sample.csv",
            "--schema",
            root / "examples" / "adult" / "schema.json",
            "--workload",
            root / "examples" / "adult" / "mixture.txt",
            "--epsilon",
            "1",
            "--ledger",
            ledger,
            "--out",
            tmp_path / "a.csv",
        ],
        ["ledger", "show", ledger, "--query", "age < 30"],
        ["ledger", "history", ledger],
        ["analysts", "add", "ann", "--ledger", ledger, "--quota", "0.1"],
        ["ledger", "analysts", ledger],
        ["ledger", "backup", ledger, tmp_path / "copy.db"],
    ]
    for argv in commands:
        assert main([str(a) for a in argv]) == 0, argv
        capsys.readouterr()
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith("-journal"))
        assert left == [], (argv, left)
