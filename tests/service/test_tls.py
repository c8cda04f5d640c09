"""``dpcurator serve --ssl-certfile/--ssl-keyfile``: the client over https."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from dpcurator.client import Client
from dpcurator.curator import Answer
from dpcurator.errors import InvalidParameter, ServiceUnavailable

from .conftest import running


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with ``openssl req``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (and neither is the cryptography package)")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def test_queries_over_https(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    with running(tmp_path, "--ssl-certfile", cert, "--ssl-keyfile", key) as s:
        assert s.url.startswith("https://127.0.0.1:")
        assert s.stdout[-1] == f"listening on {s.url}"
        s.add("ann")
        with s.client("ann", verify=str(cert)) as c:
            a = c.count("age < 30", epsilon=0.1)
            assert isinstance(a, Answer) and a.charge_id == 1
            assert c.remaining() == pytest.approx(99.9)
        with s.client("ann", verify=cert) as c:  # a Path works too
            assert c.history()[0].charge_id == 1
        # the system's authorities do not know this certificate: no answer, no charge
        with s.client("ann") as c, pytest.raises(ServiceUnavailable):
            c.count("age < 30", epsilon=0.1)
        # plain http to the https port is no answer either
        plain = Client(s.url.replace("https", "http"), s.tokens["ann"], timeout=10)
        with plain, pytest.raises(ServiceUnavailable):
            plain.count("age < 30", epsilon=0.1)
        assert s.charges() == 1
        with httpx.Client(verify=False) as h:  # the error shapes are the same over TLS
            r = h.get(f"{s.url}/v1/budget")
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_a_missing_ca_file_is_invalid_parameter(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match="verify="):
        Client("https://127.0.0.1:1", "dpc_token", verify=str(tmp_path / "nope.pem"))


def test_connections_over_tls_close_cleanly_and_are_cut_off(tmp_path: Path) -> None:
    """Over TLS, answers end their connections without an error in the log (uvicorn
    closes a lost connection a second time, and a closed TLS transport cannot be asked
    about its buffer: every connection logged a traceback), and a TLS connection that
    sends no request is cut off after read_timeout."""
    import socket
    import ssl
    import time

    cert, key = self_signed(tmp_path)
    config = "[server]\nread_timeout = 1\n"
    with running(tmp_path, "--ssl-certfile", cert, "--ssl-keyfile", key, config=config) as s:
        context = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(verify=context) as h:
            for _ in range(5):
                assert h.get(f"{s.url}/v1/health", headers={"Connection": "close"}).is_success
        host, port = s.url.removeprefix("https://").split(":")
        with context.wrap_socket(
            socket.create_connection((host, int(port))), server_hostname=host
        ) as tls:
            tls.settimeout(10)
            start = time.monotonic()
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                assert tls.recv(100) == b""  # closed by the server, nothing sent
            assert time.monotonic() - start < 5
        time.sleep(0.5)
        log = s.log()
        assert "Traceback" not in log and "Exception in callback" not in log, log[-2000:]
