"""What may be said about a PostgreSQL ledger: its URL read into what libpq needs and
what messages show, and the driver's errors said again in words of our own.

A ledger URL can carry secrets: the password of its user information
(``postgresql://user:PASSWORD@host/db``) and every query parameter whose name holds
``password`` or ``secret`` (``password=``, ``sslpassword=``, in any case, its name
percent-encoded or not). None of them ever reaches an output, a message, a log or a
hint: the URL is shown without them (:attr:`LedgerURL.shown`), a command to type again
has ``PASSWORD`` in their place (:attr:`LedgerURL.template`), and an error of the
driver is reworded to a short class of failure, any of its text that is kept scrubbed
of every form of every secret (:func:`reword`). A ``passfile=`` is shown as given (a
path): libpq reads that file, dpcurator never does.

Reading a URL. libpq's own grammar (``postgresql://[userinfo@][hosts][/dbname][?k=v&...]``,
which includes the form ``postgresql:///dbname?host=/run/postgresql&port=5433``), with
one strictness of ours: the user information ends at the last ``@`` before the first
``/`` or ``?``, and no ``@`` may come after it. A password with an unencoded ``/`` or
``?`` would otherwise be read as a host, a database or a parameter, and shown as one;
such a URL is refused by a message that quotes none of it. Percent-escapes are decoded
strictly (a ``%`` not followed by two hex digits is refused, without quoting the text).
An ``&`` in a password parameter must be written ``%26``: unencoded, it starts another
parameter; a tail that is no parameter of libpq's is refused without being shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from dpcurator.errors import LedgerError


def is_url(target: str) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a file."""
    return target.startswith(("postgresql://", "postgres://"))


DEFAULT_SCHEMA = "dpcurator"
#: The words that make a URL parameter a secret (compared without case).
SECRET_WORDS = ("password", "secret")
#: What a hint shows in place of a secret.
PLACEHOLDER = "PASSWORD"
_HIDDEN = "***"
_STRAY = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}")
_ENCODE = (
    "percent-encode @, / and ? in the user name, the password and the parameters "
    "(as %40, %2F and %3F)"
)


def is_secret(name: str) -> bool:
    """Whether the URL parameter ``name`` (decoded) holds a secret."""
    low = name.lower()
    return any(w in low for w in SECRET_WORDS)


@dataclass(frozen=True)
class LedgerURL:
    """A PostgreSQL ledger URL, read.

    ``shown``: the URL without its secrets (messages and outputs name the ledger so);
    ``template``: the URL with ``PASSWORD`` in place of each secret (a command to type
    again); ``schema``: the ledger's schema; ``public``: the URL libpq reads, without the
    secrets and the schema; ``secret_params``: the secrets, as libpq keywords and
    decoded values; ``secrets``: every form of every secret, to scrub from a text."""

    shown: str
    template: str
    schema: str
    public: str
    secret_params: tuple[tuple[str, str], ...]
    secrets: tuple[str, ...]
    query_secret: bool

    def scrub(self, text: str) -> str:
        """``text`` on one line, without any form of any secret of this URL."""
        return scrub(text, self.secrets)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` on one line, every occurrence of each of ``secrets`` replaced."""
    for s in secrets:
        text = text.replace(s, _HIDDEN)
    one = " ".join(text.split())
    for s in secrets:
        one = one.replace(" ".join(s.split()), _HIDDEN) if s.split() else one
    return one


def _decoded(raw: str) -> str | None:
    """``raw`` percent-decoded strictly: None if a ``%`` is not an escape or the bytes
    are not UTF-8."""
    if _STRAY.search(raw):
        return None
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None


def _forms(raw: str, value: str) -> list[str]:
    """Every way a secret may be written: as given, decoded, and encoded again."""
    return [f for f in {raw, value, quote(value, safe=""), quote(value)} if f]


def read_url(url: str) -> LedgerURL:
    """``url`` (``postgresql://`` or ``postgres://``) read; LedgerError, quoting no secret,
    if it cannot be."""
    scheme, _, rest = url.partition("://")
    cuts = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    cut = min(cuts, default=len(rest))
    head, tail = rest[:cut], rest[cut:]
    if "@" in tail:
        raise LedgerError(f"the ledger URL has an @ after its host: {_ENCODE}")
    userinfo, _, hosts = head.rpartition("@")
    user, _, password_raw = userinfo.partition(":")
    path, _, query = tail.partition("?")
    base = f"{scheme}://{user + '@' if user else ''}{hosts}{path}"
    if _decoded(user) is None:
        raise LedgerError(
            f"ledger {base}: the user name has a % that is not an escape (write % as %25) "
            "or is not UTF-8"
        )
    if ":" in (_decoded(user) or ""):  # user%3Apassword: a password hidden in the name
        raise LedgerError(
            "the ledger URL's user name holds a ':' (written %3A): give the password after "
            "an unencoded ':' (postgresql://user:PASSWORD@host/db), or in a passfile"
        )
    secrets: list[str] = []
    secret_params: list[tuple[str, str]] = []
    if password_raw:
        password = _decoded(password_raw)
        if password is None:
            raise LedgerError(
                f"ledger {base}: the password has a % that is not an escape (write % as "
                "%25) or is not UTF-8; it is not shown"
            )
        secrets += _forms(password_raw, password)
        secret_params.append(("password", password))
    schema = None
    shown_q: list[str] = []
    template_q: list[str] = []
    public_q: list[str] = []
    query_secret = False
    for piece in query.split("&") if query else []:
        name_raw, eq, value_raw = piece.partition("=")
        if not eq:  # libpq refuses it too; it may be the tail of a password with an &
            raise LedgerError(
                f"ledger {base}: a parameter without = (write & in a password as %26); "
                "the parameters are not shown"
            )
        name = _decoded(name_raw)
        if name is None:
            raise LedgerError(
                f"ledger {base}: a parameter's name has a % that is not an escape (write % "
                "as %25) or is not UTF-8"
            )
        if is_secret(name):
            value = _decoded(value_raw)
            if value is None:
                raise LedgerError(
                    f"ledger {base}: parameter {name} has a % that is not an escape (write % "
                    "as %25) or is not UTF-8; its value is not shown"
                )
            secrets += _forms(value_raw, value)
            secret_params.append((name, value))
            template_q.append(f"{name_raw}={PLACEHOLDER}")
            query_secret = True
            continue
        shown_q.append(piece)
        template_q.append(piece)
        if name == "schema":
            schema = _decoded(value_raw)
            if schema is None:
                raise LedgerError(f"ledger {base}: schema= has a % that is not an escape")
        else:
            public_q.append(piece)
    secrets.sort(key=len, reverse=True)

    def join(pieces: list[str]) -> str:
        return "?" + "&".join(pieces) if pieces else ""

    template_user = f"{user}:{PLACEHOLDER}" if password_raw else user
    template_at = "@" if template_user else ""
    return LedgerURL(
        shown=base + join(shown_q),
        template=f"{scheme}://{template_user}{template_at}{hosts}{path}{join(template_q)}",
        schema=DEFAULT_SCHEMA if schema is None else schema,
        public=base + join(public_q),
        secret_params=tuple(secret_params),
        secrets=tuple(secrets),
        query_secret=query_secret,
    )


def with_schema(url: str, schema: str) -> str:
    """``url`` naming the ledger in ``schema`` instead (every other part as given)."""
    stem, _, query = url.partition("?")
    pieces = [p for p in query.split("&") if p and unquote(p.partition("=")[0]) != "schema"]
    return f"{stem}?{'&'.join([*pieces, f'schema={schema}'])}"


def unknown_scheme(text: str) -> str:
    """What a message says of ``text``, a URL of a kind dpcurator does not know: its
    scheme alone (the rest may hold a password)."""
    scheme = text.split("://", 1)[0]
    if _SCHEME.fullmatch(scheme):
        return f"ledger {scheme}://...: unknown kind of ledger {scheme!r}"
    return "the ledger URL: unknown kind of ledger"


# --- the driver's errors ------------------------------------------------------------------

#: libpq's words for a failed connection (searched for in its message, in lower case, in
#: this order), and what a message says instead.
_CONNECTING = tuple(
    (re.compile(words), phrase)
    for words, phrase in (
        ("password authentication failed", "authentication failed (wrong user name or password)"),
        (
            "no password supplied",
            "the server asks for a password and none was given (give it in a passfile or "
            "PGPASSWORD)",
        ),
        ("authentication failed", "authentication failed"),
        (r"no pg_hba\.conf entry", "the server does not let this user in from here (pg_hba.conf)"),
        (r"role \S+ does not exist", "no such user"),
        (r"database \S+ does not exist", "no such database"),
        ("connection refused", "connection refused (is a server listening there?)"),
        ("timeout", "timed out"),
        (
            "could not translate host name|failed to resolve host|name or service not known",
            "unknown host",
        ),
        ("no such file or directory", "no server at that socket"),
        ("no route to host|network is unreachable", "the host cannot be reached"),
        ("too many", "the server has too many connections"),
        ("starting up|shutting down|recovery", "the server is starting up or shutting down"),
        ("invalid port", "an invalid port"),
        (r"invalid integer value \S+ for connection option \W?(\w+)", r"an invalid number for \1"),
        (r"invalid (\w+) value", r"an invalid value of \1"),
        (r"invalid connection option \W?(\w+)", r"an unknown connection parameter \1"),
        (r"invalid uri query parameter\W+(\w+)", r"an unknown parameter \1"),
        (r"\buri\b|percent", "libpq cannot read its hosts, ports or parameters"),
        ("certificate", "the TLS certificate was refused (see sslmode and sslrootcert)"),
        ("ssl", "TLS failed (see sslmode)"),
        ("gss", "GSSAPI failed"),
        ("terminating connection", "connection lost: the server ended the session"),
        (
            "server closed the connection|connection is (lost|closed|bad)|could not "
            "(receive|send) data|consuming input failed",
            "connection lost",
        ),
    )
)

#: SQLSTATEs (and their classes, two characters) and what a message says.
_STATES = {
    "08": "connection lost",
    "28": "authentication failed",
    "3D000": "no such database",
    "40001": "serialisation failure",
    "40P01": "deadlock",
    "40": "the server rolled the transaction back",
    "42501": "permission denied (the user may not use the ledger's schema or tables)",
    "55P03": "lock timeout (another curator held the ledger's lock for 60 s)",
    "57014": "statement cancelled",
    "57P01": "the server ended the session (an administrator, or its shutdown)",
    "57P02": "the server ended the session (a crash of another session)",
    "57P03": "the server cannot take connections now",
    "25P03": "the server ended a transaction left idle for 60 s",
    "53": "the server is out of resources (connections, memory or disk)",
    "23": "a row the ledger's table definitions refuse",
}


def reword(err: BaseException, url: LedgerURL | None) -> str:
    """A short class of failure for the driver's error ``err``, on one line: what the
    server said under a known SQLSTATE (its primary message, scrubbed), else libpq's
    words matched to a phrase of ours; text that matches no phrase is kept only scrubbed
    of every secret of ``url``."""
    secrets = url.secrets if url is not None else ()
    state = getattr(err, "sqlstate", None) or ""
    if state:
        phrase = _STATES.get(state) or _STATES.get(state[:2])
        if state[:2] in ("08", "28"):
            return f"{phrase} (SQLSTATE {state})"
        primary = getattr(getattr(err, "diag", None), "message_primary", None) or ""
        said = scrub(primary, secrets)[:300]
        what = phrase or _condition(type(err).__name__)
        return f"{what} (SQLSTATE {state}{': ' + said if said else ''})"
    text = " ".join(str(err).split())
    low = text.lower()
    for words, phrase in _CONNECTING:
        found = words.search(low)
        if found:
            return found.expand(phrase)
    return f"{_condition(type(err).__name__)}: {scrub(text, secrets)[:300]}"


def _condition(name: str) -> str:
    """``CheckViolation`` as ``check violation``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()
