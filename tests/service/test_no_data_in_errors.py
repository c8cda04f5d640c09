"""No message, status or header depends on the private data.

Two servers over two different data files with the same public schema (and the same
budget, analysts and history of requests) answer the same requests with the same
statuses, the same headers and byte-identical error bodies; successful answers differ
only in their noisy values (and the times of the history).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from .conftest import Server, running, write_people

NOISY = {"value", "interval", "answer", "created"}

REQUESTS: list[tuple[str | None, str, str, object]] = [
    # (who, method, path, JSON body, or bytes for a raw body)
    ("ann", "GET", "/v1/schema", None),
    ("ann", "POST", "/v1/count", {"query": "age < 30", "epsilon": 0.5}),
    ("ann", "POST", "/v1/count", {"query": "age = 300", "epsilon": 0.5}),
    ("ann", "POST", "/v1/count", {"query": "region = 'mars'", "epsilon": 0.5}),
    ("ann", "POST", "/v1/count", {"query": "agee < 3", "epsilon": 0.5}),
    ("ann", "POST", "/v1/count", {"query": "age < 30 AND", "epsilon": 0.5}),
    ("ann", "POST", "/v1/count", {"query": "age < 30", "epsilon": 0.6}),
    ("ann", "POST", "/v1/count", {"query": "age < 30", "epsilon": 5}),
    ("ann", "POST", "/v1/count", {"query": "age < 30", "epsilon": 1e-300}),
    ("ann", "POST", "/v1/count", {"query": "age < 30", "rho": 0.1}),
    ("ann", "POST", "/v1/count", {"query": "age < 3 AND " * 2000, "epsilon": 0.1}),
    ("ann", "POST", "/v1/count", {"query": 5, "epsilon": 0.1}),
    ("ann", "POST", "/v1/count", {"query": "age < 3", "epsilon": 0.1, "extra": []}),
    ("ann", "POST", "/v1/count", b'{"query": "age < 3", "epsilon": 1e400}'),
    ("ann", "POST", "/v1/count", b"{"),
    ("ann", "POST", "/v1/count", b" " * 1_000_001),
    ("ann", "POST", "/v1/histogram", {"attribute": "age", "bins": [0, 50, 100], "epsilon": 0.25}),
    ("ann", "POST", "/v1/histogram", {"attribute": "age", "bins": [50, 0], "epsilon": 0.25}),
    ("ann", "POST", "/v1/histogram", {"attribute": "sex", "bins": [0, 1], "epsilon": 0.25}),
    ("ann", "POST", "/v1/marginal", {"attributes": ["sex", "region"], "epsilon": 0.25}),
    ("ann", "POST", "/v1/marginal", {"attributes": ["sex", "sex"], "epsilon": 0.25}),
    ("ann", "POST", "/v1/sum", {"attribute": "age", "lower": 0, "upper": 99, "epsilon": 0.25}),
    ("ann", "POST", "/v1/sum", {"attribute": "age", "lower": 0, "upper": 10**30, "epsilon": 1}),
    ("ann", "POST", "/v1/sum", {"attribute": "sex", "lower": 0, "upper": 1, "epsilon": 1}),
    ("ann", "POST", "/v1/release", {"queries": ["score < 5", "score > 4"], "costs": [0.2, 0.3]}),
    ("ann", "POST", "/v1/release", {"queries": ["score < 5", "score > 4"], "costs": [0.2, 9]}),
    ("ann", "POST", "/v1/release", {"workload": "score < 2\nhistogram(sex)", "epsilon": 0.1}),
    ("ann", "POST", "/v1/release", {"workload": "histogram(nope)", "epsilon": 0.1}),
    ("ann", "POST", "/v1/estimate", {"kind": "count", "query": "age < 30", "epsilon": 0.6}),
    ("ann", "POST", "/v1/estimate", {"kind": "sum", "attribute": "age", "epsilon": 0.6}),
    ("ann", "GET", "/v1/budget?query=age%20%3C%2030", None),
    ("ann", "GET", "/v1/budget?query=age%20%3C", None),
    ("ann", "GET", "/v1/budget", None),
    ("ann", "GET", "/v1/history", None),
    ("ann", "GET", "/v1/admin/ledger", None),
    ("ann", "DELETE", "/v1/admin/analysts/root", None),
    ("root", "DELETE", "/v1/admin/analysts/nobody", None),
    ("root", "GET", "/v1/admin/analysts", None),
    ("root", "GET", "/v1/admin/ledger", None),
    (None, "GET", "/v1/budget", None),
    ("ann", "GET", "/v1/nope", None),
    ("ann", "PUT", "/v1/count", None),
]


def send(s: Server, who: str | None, method: str, path: str, body: object) -> httpx.Response:
    headers = {} if who is None else {"Authorization": f"Bearer {s.tokens[who]}"}
    with httpx.Client(base_url=s.url, timeout=60, headers=headers) as h:
        if isinstance(body, bytes):
            return h.request(
                method, path, content=body, headers={"Content-Type": "application/json"}
            )
        return h.request(method, path, json=body)


def denoised(x: object) -> object:
    if isinstance(x, dict):
        return {k: denoised(v) for k, v in x.items() if k not in NOISY}
    if isinstance(x, list):
        return [denoised(v) for v in x]
    return x


def test_two_data_files_same_errors_statuses_and_headers(tmp_path: Path) -> None:
    first = write_people(tmp_path / "a", rows=600, variant=7)
    second = write_people(tmp_path / "b", rows=40, variant=11)
    assert first[0].read_bytes() != second[0].read_bytes()
    with (
        running(tmp_path / "a", data=first, budget=("--epsilon", "1")) as one,
        running(tmp_path / "b", data=second, budget=("--epsilon", "1")) as two,
    ):
        for s in (one, two):
            s.add("root", "--admin")
            s.add("ann")
        errors = 0
        for who, method, path, body in REQUESTS:
            a, b = (send(s, who, method, path, body) for s in (one, two))
            what = f"{method} {path} {str(body)[:60]}"
            assert a.status_code == b.status_code, what
            skip = {"date"} | ({"content-length"} if a.is_success else set())
            ha = {k: v for k, v in a.headers.items() if k not in skip}
            hb = {k: v for k, v in b.headers.items() if k not in skip}
            assert ha == hb, what
            if a.is_success:
                assert denoised(a.json()) == denoised(b.json()), what
            else:
                errors += 1
                assert a.content == b.content, what
                assert set(a.json()) == {"error", "message"}, what
        assert errors >= 25
