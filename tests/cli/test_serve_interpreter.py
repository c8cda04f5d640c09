"""The server's interpreter settings (dpcurator.cli.serve_interpreter), in a fresh
interpreter of their own (they change process-wide state): shorter lock slices, the
start-up heap frozen, and the survivors of a slow full collection frozen too."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import gc, json, sys, time
from dpcurator.cli import serve_interpreter as si
si.tune()
at_start = gc.get_freeze_count()
si.tune()  # a second call changes nothing
again = gc.get_freeze_count()
keep = [[i] for i in range(2_000_000)]  # long-lived objects: a slow full collection
t = time.perf_counter()
gc.collect()
slow = time.perf_counter() - t
for _ in range(100):  # the freezer's thread freezes them
    if gc.get_freeze_count() >= len(keep):
        break
    time.sleep(0.05)
t = time.perf_counter()
gc.collect()
after = time.perf_counter() - t
print(json.dumps({"switch": sys.getswitchinterval(), "at_start": at_start, "again": again,
                  "frozen": gc.get_freeze_count(), "kept": len(keep), "slow": slow,
                  "after": after}))
"""


def test_tune_freezes_the_start_and_what_a_slow_collection_kept():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["switch"] == 0.001
    assert got["at_start"] > 1_000  # the modules imported so far, out of the way
    assert got["again"] == got["at_start"]
    assert got["slow"] > 0.02  # the case the freezer is for ...
    assert got["frozen"] >= got["at_start"] + got["kept"]  # ... and it froze them
    assert got["after"] < got["slow"]  # the next full collection walks none of them
