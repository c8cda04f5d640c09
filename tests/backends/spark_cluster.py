"""A standalone Spark cluster on 127.0.0.1 for the cluster test and the Spark benchmark:
a master and one-core workers started from pyspark's own launch classes
(``bin/spark-class``), each in its own process group, stopped as a whole on exit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

#: Seconds the master, then the workers, may take to come up.
START_SECONDS = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_env(tmp: Path) -> dict[str, str]:
    """The environment of Spark processes: pyspark's own Spark, bound to 127.0.0.1, logs
    in ``tmp``, workers running this Python."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    return {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": sys.executable,
    }


def spark_class(tmp: Path) -> Path:
    return Path(spark_env(tmp)["SPARK_HOME"]) / "bin" / "spark-class"


@contextlib.contextmanager
def standalone_cluster(workers: int, memory: str, tmp: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with ``workers`` one-core workers of
    ``memory`` each (logs and work folders in ``tmp``)."""
    env = spark_env(tmp)
    launcher = str(spark_class(tmp))
    port, ui = free_port(), free_port()
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> None:
        with open(tmp / log, "wb") as out:  # the child keeps its own descriptor
            procs.append(
                subprocess.Popen(
                    [launcher, *args],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def alive() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))

    def wait(ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"Spark {what}: a process exited with {p.returncode}")
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            time.sleep(0.5)
        raise RuntimeError(f"Spark {what}: not up after {START_SECONDS} s (logs in {tmp})")

    master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    try:
        start([*master, "--port", str(port), "--webui-port", str(ui)], "master.log")
        wait(lambda: alive() >= 0, "master")
        for i in range(workers):
            start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    f"spark://127.0.0.1:{port}",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(tmp / f"worker{i}"),
                ],
                f"worker{i}.log",
            )
        wait(lambda: alive() == workers, "workers")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
