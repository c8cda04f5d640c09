"""Every claim in the README, the docs and the examples about what a command prints is
checked here against the command's real output (the tutorial's in test_tutorial.py, the
demo's in tests/cli/test_demo.py): a session shown in a doc is run and compared line by
line, a JSON answer field by field (noisy values aside), a message word for word."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
TOKEN = re.compile(r"dpc_[0-9a-f]{16}_[A-Za-z0-9_-]{43}")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    return e


def sh(command: str, cwd: Path, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = command.replace(".venv/bin/", "")
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**env(), **(extra or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def readme_commands() -> dict[str, str]:
    """The README's commands, by their first words (``dpcurator account`` ...)."""
    out: dict[str, str] = {}
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.strip()
            if line.startswith(".venv/bin/dpcurator "):
                words = line.split()
                out[" ".join(words[:2]).removeprefix(".venv/bin/")] = line
    return out


def session(doc: str, start: str) -> Iterator[tuple[str, list[str]]]:
    """The ``$ command`` lines of the first code block at or after ``start`` in ``doc``,
    each with the output lines the doc shows under it."""
    text = (ROOT / "docs" / doc).read_text()
    opening = text.rfind("```", 0, text.index(start))
    block = re.search(r"```\w*\n(.*?)```", text[opening:], re.S)
    assert block is not None
    command: str | None = None
    shown: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            if command is not None:
                yield command, shown
            command, shown = line[2:], []
        elif command is not None:
            shown.append(line)
    if command is not None:
        yield command, shown


# --- README ----------------------------------------------------------------------------


def test_readme_account_runs_every_theorem(tmp_path: Path) -> None:
    # "every composition theorem that applies to 100 pure 0.1-DP releases and 10
    # Gaussians (σ = 20), and which do not; the tightest rigorous one marked"
    from dpcurator.privacy.composition import METHODS

    assert "every composition theorem that applies" in README
    p = sh(readme_commands()["dpcurator account"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "pure:0.1 x100, gaussian:20 x10" in p.stdout
    rows = [fields(ln.lstrip("*")) for ln in p.stdout.splitlines()[3:] if ln.strip()]
    shown = {r[0] for r in rows if r and r[0] in METHODS}
    absent = re.search(r"^not applicable here: (.*)$", p.stdout, re.M)
    assert absent is not None
    assert shown | set(absent.group(1).split(", ")) == set(METHODS)
    assert re.search(r"^\* best rigorous: \w+, epsilon = [\d.]+$", p.stdout, re.M)


def test_readme_overlap_is_against_the_colouring_bound(tmp_path: Path) -> None:
    p = sh(readme_commands()["dpcurator overlap"], ROOT)
    assert p.returncode == 0, p.stderr
    assert re.search(r"^gamma: +28 \(exact\)$", p.stdout, re.M)
    assert re.search(r"^colouring bound: 28 \(Smith et al\. 2022", p.stdout, re.M)
    assert "maximum overlap of a workload, against the paper's colouring bound" in README


def test_readme_answer_twice_and_the_ledger(tmp_path: Path) -> None:
    commands = readme_commands()
    answer = commands["dpcurator answer"].replace("/tmp/", f"{tmp_path}/")
    show = commands["dpcurator ledger"].replace("/tmp/", f"{tmp_path}/")
    first = sh(answer, ROOT)
    assert first.returncode == 0, first.stderr
    second = sh(answer, ROOT)  # "the second run is refused, because the first one spent it"
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert "refused" in second.stderr and "spent the budget" in second.stderr
    ledger = sh(show, ROOT)  # "what that ledger has spent and left, per analyst and table"
    assert ledger.returncode == 0, ledger.stderr
    lines = ledger.stdout.splitlines()
    assert any(ln.startswith("spent:") for ln in lines)
    assert any(ln.startswith("on 'age < 30': spent") for ln in lines)
    assert any(ln.startswith("table ") for ln in lines)
    assert any(ln.startswith("analyst ") for ln in lines)
    # the guarantee the answer printed is what the ledger says was spent: one figure
    guarantee = re.search(r"^guarantee: +(\S+)-DP", first.stdout, re.M)
    spent = re.search(r"^spent: +(\S+) at the worst point", ledger.stdout, re.M)
    assert guarantee and spent and guarantee.group(1) == spent.group(1)
    assert not list(tmp_path.glob("*-journal"))


def test_readme_serve_demo_and_its_client(tmp_path: Path) -> None:
    """``serve --demo`` prints a token and where the dashboard is; the README's client
    snippet, with that token, prints a value, an interval and what remains."""
    command = next(
        b.strip() for b in re.findall(r"```sh\n(.*?)```", README, re.S) if "serve --demo" in b
    )
    server = subprocess.Popen(
        [*shlex.split(command.replace(".venv/bin/", "")), "--port", "0"],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = []
        assert server.stdout is not None
        for line in server.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("listening on "):
                break
        url = lines[-1].split()[-1]
        (token,) = {t for ln in lines for t in TOKEN.findall(ln)}
        assert any(ln.startswith("demo: analyst token") for ln in lines)
        assert f"dashboard: {url}/dashboard (sign in with a token)" in "\n".join(lines)
        snippet = re.search(r"```python\n(.*?)```", README, re.S)
        assert snippet is not None
        code = snippet.group(1).replace("http://127.0.0.1:8000", url).replace("dpc_...", token)
        p = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert p.returncode == 0, p.stderr
        count, means, median = p.stdout.splitlines()
        shown = re.fullmatch(r"(-?\d+) \((-?\d+), (-?\d+)\) ([\d.]+)", count)
        assert shown is not None, p.stdout
        value, low, high, remaining = shown.groups()
        assert int(low) < int(value) < int(high) and float(remaining) == pytest.approx(0.9)
        groups = ast.literal_eval(means)  # a mean per sex, each inside its interval
        assert [g for g, _, _ in groups] == ["sex = 'Female'", "sex = 'Male'"]
        assert all(lo <= v <= hi for _, v, (lo, hi) in groups)
        assert 17 <= int(median) <= 90
    finally:
        server.terminate()
        server.wait(timeout=30)


# --- docs -------------------------------------------------------------------------------


def fields(line: str) -> list[str]:
    return [f for f in re.split(r"\s{2,}", line.strip()) if f]


def matches(shown: str, real: str) -> bool:
    """A shown line of a table matches a real one field by field; a field ending in
    ``...`` only has to start the real one."""
    a, b = fields(shown), fields(real)
    if len(a) != len(b):
        return False
    return all(
        y.startswith(x[:-3].rstrip()) if x.endswith("...") else x == y
        for x, y in zip(a, b, strict=True)
    )


def test_accounting_shows_the_real_account_output(tmp_path: Path) -> None:
    ((command, shown),) = list(session("accounting.md", "$ dpcurator account"))
    real = sh(command, tmp_path).stdout.splitlines()
    i = 0
    for line in shown:
        if line.strip() == "...":
            break
        while i < len(real) and not (
            matches(line, real[i]) if line.strip() else not real[i].strip()
        ):
            i += 1
        assert i < len(real), f"not in the real output: {line!r}\n" + "\n".join(real)
        i += 1


def test_service_analysts_session_is_real(tmp_path: Path) -> None:
    from dpcurator.curator.ledger import Ledger

    Ledger(tmp_path / "ledger.db", {"budget": "PureDP(1)", "tables": {}}).close()
    for command, shown in session("service.md", "$ dpcurator analysts add alice"):
        p = sh(command, tmp_path)
        assert p.returncode == 0, p.stderr
        real = TOKEN.sub("TOKEN", p.stdout).splitlines()
        assert real == [TOKEN.sub("TOKEN", ln) for ln in shown], command


PAIR = re.compile(r'"([A-Za-z_]+)":\s*("(?:[^"\\]|\\.)*"|-?[\d.]+(?:e-?\d+)?|true|false|null)')
#: Fields of an answer that differ from run to run (noise, time, a new token).
NOISY = {"value", "created", "token", "interval", "std_error", "count"}


def pairs(text: str) -> list[tuple[str, object]]:
    return [(k, json.loads(v)) for k, v in PAIR.findall(text) if k not in NOISY]


def subsequence(small: list, big: list) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def test_service_api_examples_are_the_demos_answers(tmp_path: Path) -> None:
    """The curl examples of docs/service.md, run in order against ``serve --demo``: each
    answer shown has the real answer's fields and values, the noisy counts aside."""
    text = (ROOT / "docs" / "service.md").read_text()
    text = text[text.index("The examples below use the demo") :]
    server = subprocess.Popen(
        [str(BIN / "dpcurator"), "serve", "--demo", "--port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = []
        assert server.stdout is not None
        for line in server.stdout:
            lines.append(line)
            if line.startswith("listening on "):
                break
        url = lines[-1].split()[-1]
        (token,) = {t for ln in lines for t in TOKEN.findall(ln)}
        variables = {
            "H": f"Authorization: Bearer {token}",
            "J": "Content-Type: application/json",
            "U": url,
        }
        blocks = list(re.finditer(r"```(\w*)\n(.*?)```", text, re.S))
        # the errors section shows what the later examples leave: it runs last
        errors = text.index("### Errors")
        after_errors = text.index("\n### ", errors + 1)
        order = sorted(range(len(blocks)), key=lambda k: errors < blocks[k].start() < after_errors)
        checked = 0
        for k in order:
            block = blocks[k]
            if block.group(1) != "sh" or "$ curl" not in block.group(2):
                continue
            outputs, inline = [], []
            body = block.group(2).replace("\\\n", " ")
            for line in body.splitlines():
                if line.startswith("$ curl"):
                    p = sh(line[2:], tmp_path, variables)
                    assert p.returncode == 0, p.stderr
                    outputs.append(p.stdout)
                elif line.strip():
                    inline.append((len(outputs) - 1, line))
            for i, shown in inline:
                assert subsequence(pairs(shown), pairs(outputs[i])), (shown, outputs[i])
                checked += 1
            after = blocks[k + 1] if k + 1 < len(blocks) else None
            between = text[block.end() : after.start()] if after is not None else ""
            if after is not None and after.group(1) == "json" and "\n#" not in between:
                shown = after.group(2)
                assert any(subsequence(pairs(shown), pairs(o)) for o in outputs), (shown, outputs)
                checked += 1
        history = sh('curl -s -H "$H" $U/v1/history', tmp_path, variables).stdout
        shown = re.search(r"### `GET /v1/history`.*?```json\n(.*?)```", text, re.S)
        assert shown is not None and subsequence(pairs(shown.group(1))[:1], pairs(history))
        assert checked >= 9
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_backends_shows_the_real_load_error(tmp_path: Path, monkeypatch) -> None:
    from dpcurator.backends import load_table
    from dpcurator.errors import DataError

    text = (ROOT / "docs" / "backends.md").read_text()
    shown = re.search(r"```\n(adult\.data: attribute 'age'.*?)```", text, re.S)
    assert shown is not None
    shown_text = " ".join(shown.group(1).split())
    # 3 ages outside [17, 90] (the first on data row 12: 200) and 1 bad sex
    columns = (ROOT / "examples" / "adult" / "columns.txt").read_text().split()
    rows = []
    for i in range(1, 21):
        age = {12: "200", 15: "5", 18: "300"}.get(i, "30")
        sex = "Other" if i == 16 else "Male"
        values = {
            "age": age,
            "sex": sex,
            "workclass": "Private",
            "education": "HS-grad",
            "education-num": "9",
            "marital-status": "Never-married",
            "occupation": "Sales",
            "relationship": "Unmarried",
            "race": "White",
            "hours-per-week": "40",
            "native-country": "Cuba",
            "income": "<=50K",
            "fnlwgt": "1",
            "capital-gain": "0",
            "capital-loss": "0",
        }
        rows.append(", ".join(values[c] for c in columns))
    data = tmp_path / "adult.data"
    data.write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path)  # the message names the file as it was given
    with pytest.raises(DataError) as err:
        load_table(
            "adult.data",
            ROOT / "examples" / "adult" / "schema.json",
            separator=", ",
            columns=columns,
        )
    assert str(err.value) == shown_text


def test_curator_shows_the_real_tamper_message(tmp_path: Path) -> None:
    import sqlite3

    from dpcurator.curator.ledger import Ledger
    from dpcurator.errors import LedgerError

    text = (ROOT / "docs" / "curator.md").read_text()
    shown = re.search(r"```\n(ledger /srv/ledger\.db: .*?)\n```", text, re.S)
    assert shown is not None
    path = tmp_path / "ledger.db"
    led = Ledger(path, {"budget": "PureDP(1)", "tables": {"t": {}}})
    for i in range(20):
        with led.transaction():
            led.insert_charge(
                analyst=None,
                table="t",
                kind="count",
                request=f"a < {i}",
                coverage={"a": [[0, i + 1]]},
                cost=Fraction(1, 100),
                level=Fraction(i + 1, 100),
                noise="discrete_laplace(100)",
            )
    led.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE charges SET cost = '1/200' WHERE id = 17")
    db.commit()
    db.close()
    with pytest.raises(LedgerError) as err:
        Ledger(path, None, create=False)
    assert str(err.value) == shown.group(1).replace("/srv/ledger.db", str(path))


def test_curator_shows_the_real_rollback_message(tmp_path: Path) -> None:
    from ledger_places import Place

    from dpcurator.curator.ledger import Ledger
    from dpcurator.errors import LedgerError

    text = (ROOT / "docs" / "curator.md").read_text()
    shown = re.search(r"```\n(ledger /srv/ledger\.db: rolled back.*?)\n```", text, re.S)
    assert shown is not None
    path = tmp_path / "ledger.db"
    led = Ledger(path, {"budget": "PureDP(1)", "tables": {"t": {}}})
    for i in range(8):
        with led.transaction():
            led.insert_charge(
                analyst=None,
                table="t",
                kind="count",
                request=f"a < {i}",
                coverage={"a": [[0, i + 1]]},
                cost=Fraction(1, 100),
                level=Fraction(i + 1, 100),
                noise="discrete_laplace(100)",
            )
    led.close()
    Place("sqlite", str(path), str(path)).roll_back(4)
    with pytest.raises(LedgerError) as err:
        Ledger(path, None, create=False)
    hashes = re.compile(r"\([0-9a-f]{16}\)")
    want = hashes.sub("(H)", shown.group(1).replace("/srv/ledger.db", str(path)))
    assert hashes.sub("(H)", str(err.value)) == want


def test_overlap_json_example_is_real(tmp_path: Path, capsys) -> None:
    text = (ROOT / "docs" / "overlap.md").read_text()
    shown = re.search(
        r"for the workload\n`(.*?)`, `(.*?)`, `(.*?)`:\n\n```json\n(.*?)```", text, re.S
    )
    assert shown is not None
    w = tmp_path / "w.txt"
    w.write_text("\n".join(shown.groups()[:3]) + "\n")
    assert (
        main(
            [
                "overlap",
                "--schema",
                str(ROOT / "examples" / "adult" / "schema.json"),
                "--workload",
                str(w),
                "--json",
            ]
        )
        == 0
    )
    real = capsys.readouterr().out
    assert subsequence(pairs(shown.group(4)), pairs(real)), real
    assert str(json.loads(real)["witness_queries"]) in shown.group(4)


# --- examples -----------------------------------------------------------------------------


def test_mixture_says_what_each_objective_does() -> None:
    from dpcurator.planner import make_plan
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema, parse_workload

    path = ROOT / "examples" / "adult" / "mixture.txt"
    comment = " ".join(
        ln.lstrip("# ") for ln in path.read_text().splitlines() if ln.startswith("#")
    )
    wl = parse_workload(path, Schema.load(ROOT / "examples" / "adult" / "schema.json"))
    assert "gamma = 8" in comment
    per_table = make_plan(wl.queries, wl.weights, PureDP(1.0), compare=False)
    assert per_table.gamma == 8 and {round(v * 8, 3) for v in per_table.values} == {1.0}
    total = make_plan(wl.queries, wl.weights, PureDP(1.0), objective="total", compare=False)
    by_line = {q.line: v * 8 for q, v in zip(total.queries, total.values, strict=True)}
    lines = path.read_text().splitlines()
    line_of = {lines[n - 1].strip(): n for n in by_line}
    big = re.search(r"marginal\(native-country, race\): ([\d.]+) times", comment)
    small = re.search(r"the total ([\d.]+) times", comment) or re.search(
        r"\(total: ([\d.]+) times\)", comment
    )
    assert big and small
    assert round(by_line[line_of["marginal(native-country, race)"]], 1) == float(big.group(1))
    assert round(by_line[line_of["total"]], 1) == float(small.group(1))


def test_marketing_workload_says_its_gamma_and_size(capsys) -> None:
    folder = ROOT / "examples" / "marketing"
    comment = (folder / "workload.txt").read_text()
    claim = re.search(
        r"gamma = (\d+) however many cells, instead of t = (\d+)", comment.replace("\n# ", " ")
    )
    assert claim is not None
    assert (
        main(
            [
                "overlap",
                "--schema",
                str(folder / "schema.json"),
                "--workload",
                str(folder / "workload.txt"),
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert (d["gamma"], d["queries"]) == (int(claim.group(1)), int(claim.group(2)))


def test_the_shipped_data_and_workloads_are_as_described(capsys) -> None:
    data = ROOT / "examples" / "data"
    rows = re.search(r"`adult-sample\.csv`: ([\d,]+) rows", (data / "README.md").read_text())
    assert rows is not None
    n = len((data / "adult-sample.csv").read_text().splitlines()) - 1  # less the header
    assert n == int(rows.group(1).replace(",", ""))
    demo = (ROOT / "src" / "dpcurator" / "cli" / "demo.py").read_text()
    assert f"({rows.group(1)} rows;" in demo  # what the demo prints about its data
    marginals = ROOT / "examples" / "adult" / "marginals.txt"
    claim = re.search(r"gamma = (\d+) whatever", marginals.read_text())
    assert claim is not None
    assert (
        main(
            [
                "overlap",
                "--schema",
                str(ROOT / "examples" / "adult" / "schema.json"),
                "--workload",
                str(marginals),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["gamma"] == int(claim.group(1))
