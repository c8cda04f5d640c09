"""The HTTP/1.1 protocol ``dpcurator serve`` speaks: uvicorn's httptools protocol, with
the bound on a request's head that uvicorn's pure-Python h11 protocol has and its
httptools protocol lacks, and its protocol-level refusals in the API's JSON.

Why httptools. uvicorn parses HTTP with h11 (pure Python) unless httptools (llhttp, the
parser of Node.js, in C) is installed; the parsing runs on the event loop, which every
request shares. With httptools a count over HTTP costs the server less of its one
interpreter (``benchmarks/service.py`` measures both).

Why a subclass. uvicorn's h11 protocol refuses a request whose unfinished line and
headers pass 16 KiB (h11's ``max_incomplete_event_size``); its httptools protocol keeps
whatever arrives until the head ends, so a single connection streaming one endless
header grows the server's memory without bound (measured: 120 MB in 20 s, and on).
Here the head is bounded (:data:`MAX_HEAD_BYTES`), and a request line or header that does not parse
(llhttp refuses control characters in a header's value, RFC 9110 §5.5) is answered in
the API's error format instead of uvicorn's plain text. Neither refusal reads a token
or data, so neither reveals anything.
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: The most bytes a request's line and headers may take: past it, 431 and the
#: connection is closed. Room for ``GET /v1/budget?query=`` with the longest query text
#: the curator takes (``MAX_QUERY_TEXT``, 20,000 characters, each percent-encoded:
#: 60,000 bytes) and 5 KiB of headers.
MAX_HEAD_BYTES = 64 * 1024


def _refusal(status: int, phrase: str, reason: str, message: str) -> bytes:
    body = json.dumps({"error": reason, "message": message}).encode()
    return b"".join(
        (
            f"HTTP/1.1 {status} {phrase}\r\n".encode(),
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        )
    )


TOO_LARGE = _refusal(
    431,
    "Request Header Fields Too Large",
    "too_large",
    f"the request's line and headers exceed {MAX_HEAD_BYTES} bytes",
)
MALFORMED = _refusal(400, "Bad Request", "invalid_request", "malformed HTTP request")


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a refused request."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a request's head bounded to
    :data:`MAX_HEAD_BYTES` and its refusals in JSON.

    Two counts, because the parser hands a header over only once it is whole. A whole
    head is measured exactly, as its target and its headers (``name: value`` and a line
    end each), and refused once the last header is read if it passes the bound. An
    unfinished head is measured by the bytes that arrive while it is open, checked
    after each read is parsed (so a head and its body arriving together never count
    the body); past the bound, it is refused without waiting for its end. Either way
    the server holds at most the bound and one read (256 KiB) of any head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = True
        self._arrived = 0  # bytes read while the head is open
        self._head_size = 0  # the head as parsed so far

    def data_received(self, data: bytes) -> None:
        if self._head_open:
            self._arrived += len(data)
        super().data_received(data)
        if self._head_open and self._arrived > MAX_HEAD_BYTES:
            self._too_large()

    def on_message_begin(self) -> None:
        self._head_size = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._head_size > MAX_HEAD_BYTES:
            self._too_large()
            raise _Refused  # the parser stops here: no route sees the request
        self._head_open, self._arrived = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._head_open = True
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        self._refuse(MALFORMED)

    def _too_large(self) -> None:
        self.logger.warning("A request's line and headers exceed %d bytes.", MAX_HEAD_BYTES)
        self._refuse(TOO_LARGE)

    def _refuse(self, response: bytes) -> None:
        """Answer ``response`` and close, once: a refused connection reads nothing more."""
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()
        self._head_open = False
