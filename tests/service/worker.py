"""A client process for the service tests (run as a script, not collected by pytest).

    worker.py http URL TOKEN N QUERY COST
    worker.py local DATA SCHEMA LEDGER EPSILON NAME N QUERY COST

It makes its session (a :class:`~dpcurator.client.Client` over HTTP, or an in-process
analyst session on the ledger file), prints ``ready``, waits for a line on stdin, then
sends N counts of QUERY at epsilon COST one after the other and prints one JSON line
per request, flushed as soon as the answer (or the error) is in hand:
``{"charge_id", "query", "value"}`` or ``{"error": exception class name}``. Over HTTP it
stops at the first error that is not a refusal (the server went away).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from dpcurator.errors import BudgetExceeded, DpCuratorError

    mode = argv[0]
    if mode == "http":
        from dpcurator.client import Client

        url, token, n, query, cost = argv[1:6]
        session = Client(url, token, timeout=60)
    else:
        from dpcurator import Curator
        from dpcurator.privacy import PureDP

        data, schema, ledger, eps, name, n, query, cost = argv[1:9]
        curator = Curator.open(data=data, schema=schema, budget=PureDP(float(eps)), ledger=ledger)
        session = curator.analyst(name)
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
