"""Notes of what was done to a connection (closed for a deadline or past the cap, an
accept that failed), logged at most once per :data:`NOTE_EVERY` seconds per kind: for
the server's connections (:mod:`.http_protocol`) and its gate's (:mod:`.gate`), which
imports no more than this."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from typing import Any

# the server's log lines keep the name they always had
log = logging.getLogger("dpcurator.service.http_protocol")

#: How often (seconds) :func:`note` logs at most, per kind: connections closed by the
#: thousand a second would otherwise be log lines by the thousand.
NOTE_EVERY = 10.0
_noted: dict[str, tuple[float, int]] = {}


def note(what: str) -> None:
    """Log ``what`` (a connection closed, an accept failed): the first at once, then
    one line per :data:`NOTE_EVERY` seconds with how many there were."""
    now = time.monotonic()
    last, skipped = _noted.get(what, (-NOTE_EVERY, 0))
    if now - last < NOTE_EVERY:
        _noted[what] = (last, skipped + 1)
        return
    more = f" (and {skipped} more since the last note)" if skipped else ""
    log.warning("%s%s", what, more)
    _noted[what] = (now, 0)


def noting_accept_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler: an accept that failed for want of file
    descriptors is noted (:func:`note`), not logged with its traceback each time (a
    burst of connections at the limit logged one a millisecond); anything else as
    asyncio would."""
    err = context.get("exception")
    if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
        note("no file descriptor left to accept a connection (ulimit -n)")
        return
    loop.default_exception_handler(context)
