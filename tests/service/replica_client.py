"""A client process of the replicas test (run as a script, not collected by pytest).

    replica_client.py TOKEN N SECONDS URL [URL ...]

It prints ``ready``, waits for a line on stdin, then sends N counts (the queries of
:data:`QUERIES` in turn, at epsilon :data:`COST`) to the first replica, moving to the
next one whenever a replica fails it, for at most SECONDS. One JSON line per request,
flushed at once: ``{"ok": charge_id, "query", "value"}``; ``{"refused": query}`` for a
refusal (HTTP 409: nothing charged); ``{"failed": query, "error"}`` for anything else (the
replica died, the database was unreachable: the request may have been charged, never
answered). Plain httpx and the documented HTTP API, so that sixteen of them start fast.
"""

from __future__ import annotations

import json
import sys
import time

QUERIES = (
    "region = 'north'",
    "age < 50",
    "sex = 'F' AND score >= 5",
    "age >= 30 AND age < 70 AND region <> 'east'",
)
COST = 0.01


def main(argv: list[str]) -> int:
    import httpx

    token, n, seconds, urls = argv[0], int(argv[1]), float(argv[2]), argv[3:]
    auth = {"Authorization": f"Bearer {token}"}
    clients = [httpx.Client(base_url=u, headers=auth, timeout=30) for u in urls]
    print("ready", flush=True)
    sys.stdin.readline()
    until = time.monotonic() + seconds
    at = 0
    for i in range(n):
        if time.monotonic() > until:
            break
        query = QUERIES[i % len(QUERIES)]
        try:
            r = clients[at].post("/v1/count", json={"query": query, "epsilon": COST})
            error = None if r.status_code in (200, 409) else f"HTTP {r.status_code}"
        except httpx.HTTPError as err:
            error = type(err).__name__
        if error is not None:
            print(json.dumps({"failed": query, "error": error}), flush=True)
            at = (at + 1) % len(clients)
            time.sleep(0.05)
        elif r.status_code == 409:
            print(json.dumps({"refused": query}), flush=True)
        else:
            a = r.json()
            print(
                json.dumps({"ok": a["charge_id"], "query": a["query"], "value": a["value"]}),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
