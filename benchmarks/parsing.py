"""Parsing: how long a WHERE clause takes to become a query, per kind of text.

    .venv/bin/python benchmarks/parsing.py [--before TREE] [--n 2000] [--repeat 5]

Why it matters: every request parses its text in a server thread holding the interpreter
lock; a batch of 2,000 counts is parsed before anything else happens to it, and while it
is, the event loop and every other request wait for their turns at the lock.

The texts (``--n`` of each, seeded):

* ``boxes``: ``age BETWEEN a AND b AND week BETWEEN c AND d`` (the varied counts of
  ``benchmarks/throughput_mix.py``);
* ``IN lists``: three ``cK IN ('vA', 'vB', ...)`` conjuncts over 12 categorical columns of
  20 values (the flood's batches in ``benchmarks/stall.py``);
* ``ORs``: two to four such conjunctions joined by OR (the flood's hard counts);
* ``mixed``: comparisons, NOT, IS NULL, parentheses, a string with a quote;
* ``padded``: a box followed by spaces up to 20,000 characters, the longest query text
  a request may send (trailing whitespace once took a tokenizer quadratic time).

Each row: the best of ``--repeat`` timings of parsing all ``--n`` texts, in microseconds
per text, for this tree and (``--before``) another source tree, each in a subprocess of
its own, alternating, and the ratio. Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stall  # the flood's texts: its batches' IN lists and its hard ORs

ROOT = Path(__file__).resolve().parent.parent
ATTRS, VALUES = stall.ATTRS, stall.VALUES
SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "week", "type": "integer", "min": 1, "max": 52},
        {"name": "name", "type": "categorical", "values": ["O'Brien", "Smith", "Lee"]},
        {"name": "income", "type": "integer", "min": 0, "max": 1000, "missing": "NA"},
        *({"name": a, "type": "categorical", "values": VALUES} for a in ATTRS),
    ]
}


def _box(rng: random.Random) -> str:  # as throughput_mix's varied counts
    a0, w0 = rng.randrange(100), rng.randrange(1, 53)
    a1, w1 = rng.randrange(a0, 100), rng.randrange(w0, 53)
    return f"age BETWEEN {a0} AND {a1} AND week BETWEEN {w0} AND {w1}"


def _mixed(rng: random.Random) -> str:
    a = rng.randrange(100)
    return (
        f"NOT (age < {a} OR age >= {a + 1}) AND (income IS NULL OR income > {rng.randrange(1000)})"
        f" AND name <> 'O''Brien' AND {rng.choice(ATTRS)} != '{rng.choice(VALUES)}'"
    )


def _padded(rng: random.Random) -> str:
    return _box(rng) + " " * 19_950  # the longest text a request may send: 20,000


KINDS = {
    "boxes": _box,
    "IN lists": stall.conjunction,
    "ORs": stall.hard_or,
    "mixed": _mixed,
    "padded": _padded,
}


def measure(n: int, repeat: int) -> dict[str, float]:
    """Microseconds per text, the best of ``repeat`` passes, per kind (in this process,
    with whatever ``dpcurator`` is on the path)."""
    from dpcurator.queries.parser import parse_query
    from dpcurator.queries.schema import Schema

    schema = Schema.from_dict(SCHEMA)
    out = {}
    for kind, make in KINDS.items():
        rng = random.Random(1)
        texts = [make(rng) for _ in range(n)]
        for t in texts[:50]:
            parse_query(t, schema)  # warm
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for t in texts:
                parse_query(t, schema)
            best = min(best, time.perf_counter() - t0)
        out[kind] = best / n * 1e6
    return out


def _in(tree: Path, n: int, repeat: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(n), str(repeat)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(int(sys.argv[2]), int(sys.argv[3]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="another source tree, measured in the same run")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    trees = [("this tree" if args.before is None else "after", ROOT)]
    if args.before is not None:
        trees.append(("before", args.before.resolve()))
    best: dict[str, dict[str, float]] = {}
    for _ in range(2):  # alternating, the best of both rounds per tree
        for label, tree in trees:
            got = _in(tree, args.n, args.repeat)
            best[label] = {k: min(v, best.get(label, {}).get(k, v)) for k, v in got.items()}
    print(f"\n{args.n} texts of each kind, best of {args.repeat} x 2 passes, µs per text")
    head = f"{'kind':10}" + "".join(f"{label:>11}" for label, _ in trees)
    print(head + (f"{'ratio':>8}" if args.before else ""))
    for kind in KINDS:
        row = f"{kind:10}" + "".join(f"{best[label][kind]:11.1f}" for label, _ in trees)
        if args.before:
            row += f"{best['before'][kind] / best['after'][kind]:7.2f}x"
        print(row)


if __name__ == "__main__":
    main()
