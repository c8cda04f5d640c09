"""A client process for the service tests (run as a script, not collected by pytest).

    worker.py http URL TOKEN N QUERY COST

It makes a :class:`~dpcurator.client.Client`, prints ``ready``, waits for a line on
stdin, then sends N counts of QUERY at epsilon COST one after the other and prints one
JSON line per request, flushed as soon as the answer (or the error) is in hand:
``{"charge_id", "query", "value"}``, ``{"error": "BudgetExceeded"}`` for a refusal, or
``{"error", "message"}`` for any other error, after which it stops (the server went
away).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from dpcurator.client import Client
    from dpcurator.errors import BudgetExceeded, DpCuratorError

    mode, url, token, n, query, cost = argv[:6]
    assert mode == "http", mode
    session = Client(url, token, timeout=60)
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(int(n)):
        try:
            a = session.count(query, epsilon=float(cost))
        except BudgetExceeded:
            print(json.dumps({"error": "BudgetExceeded"}), flush=True)
            continue
        except DpCuratorError as err:
            print(json.dumps({"error": type(err).__name__, "message": str(err)}), flush=True)
            break
        print(
            json.dumps({"charge_id": a.charge_id, "query": a.query, "value": a.value}), flush=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
