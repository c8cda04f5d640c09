"""How a PostgreSQL ledger URL is shown: never with a secret (the password of its user
information, any ``*password*`` parameter, in any encoding), whatever the secret's text;
a URL that cannot be read is refused by a message that quotes none of it. No server
needed: what is shown is decided before connecting."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcurator.curator.stores import location_of, target_of, template_of
from dpcurator.curator.stores.postgres_text import read_url, reword, scrub, with_schema
from dpcurator.errors import LedgerError

HOST = "postgresql://dpc{info}@db.internal:5433/curator"
SHOWN = "postgresql://dpc@db.internal:5433/curator"
passwords = st.text(min_size=1, max_size=40)


def refused(url: str) -> str:
    with pytest.raises(LedgerError) as info:
        location_of(url)
    text = str(info.value)
    assert "\n" not in text
    return text


@given(passwords)
def test_a_percent_encoded_password_is_never_shown(pw: str) -> None:
    url = HOST.format(info=":" + quote(pw, safe="")) + "?schema=s&sslmode=require"
    read = read_url(url)
    assert read.shown == location_of(url) == f"{SHOWN}?schema=s&sslmode=require"
    assert read.template == HOST.format(info=":PASSWORD") + "?schema=s&sslmode=require"
    assert read.secret_params == (("password", pw),) and read.schema == "s"
    assert read.public == f"{SHOWN}?sslmode=require"


@given(passwords, st.sampled_from(["password", "sslpassword", "PassWord", "pass%77ord"]))
def test_a_password_parameter_is_never_shown(pw: str, name: str) -> None:
    url = f"{SHOWN}?sslmode=disable&{name}={quote(pw, safe='')}&schema=s"
    read = read_url(url)
    assert read.shown == f"{SHOWN}?sslmode=disable&schema=s"
    assert read.template == f"{SHOWN}?sslmode=disable&{name}=PASSWORD&schema=s"
    assert read.public == f"{SHOWN}?sslmode=disable"


@given(passwords)
def test_an_unencoded_password_is_shown_nowhere_or_refused_without_a_word_of_it(pw: str) -> None:
    """As a custodian may type it: every character as is. It is read (up to the last @
    before the first / or ?) or the URL is refused by a message that depends on no
    character of it."""
    url = HOST.format(info=":" + pw)
    try:
        read = read_url(url)
    except LedgerError as err:
        assert str(err) in {
            "the ledger URL has an @ after its host: percent-encode @, / and ? in the user "
            "name, the password and the parameters (as %40, %2F and %3F)",
            f"ledger {SHOWN}: the password has a % that is not an escape (write % as %25) "
            "or is not UTF-8; it is not shown",
        }
        return
    assert read.shown == SHOWN and read.template == HOST.format(info=":PASSWORD")


@given(passwords.filter(lambda pw: "&" not in pw))
def test_an_unencoded_password_parameter_is_never_shown(pw: str) -> None:
    url = f"{SHOWN}?password={pw}&schema=s"
    try:
        read = read_url(url)
    except LedgerError as err:
        assert str(err).startswith("the ledger URL has an @") or str(err) == (
            f"ledger {SHOWN}: parameter password has a % that is not an escape (write % as "
            "%25) or is not UTF-8; its value is not shown"
        )
        return
    assert read.shown == f"{SHOWN}?schema=s"


def test_an_unencoded_ampersand_in_a_password_parameter_is_refused_unshown() -> None:
    text = refused(f"{SHOWN}?password=Zq7Kw&Jx4Rt")
    assert "Zq7Kw" not in text and "Jx4Rt" not in text and "%26" in text


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://dpc:Zq7Kw%zzJx4Rt@db/c",  # a stray %
        "postgresql://dpc:Zq7Kw%Jx4Rt@db/c",
        "postgresql://dpc:Zq7Kw%FFJx4Rt@db/c",  # not UTF-8
        "postgresql://dpc@db/c?password=Zq7Kw%zzJx4Rt",
        "postgresql://dpc@db/c?sslpassword=Zq7Kw%Jx4Rt",
        "postgresql://dpc:Zq7Kw/Jx4Rt@db/c",  # an unencoded /
        "postgresql://dpc:Zq7Kw?Jx4Rt@db/c",  # an unencoded ?
        "postgresql://dpc@db/c?x=1&password=Zq7Kw@Jx4Rt",
        "postgresql://dpc@db/c?pass%zzword=Zq7KwJx4Rt",  # a name that cannot be read
    ],
)
def test_urls_that_cannot_be_read_quote_no_secret(url: str) -> None:
    text = refused(url)
    assert "Zq7Kw" not in text and "Jx4Rt" not in text, text


def test_libpqs_own_form_is_read() -> None:
    url = "postgresql:///curator?host=/run/postgresql&port=5433&user=dpc&password=Zq7Kw"
    read = read_url(url)
    assert read.shown == "postgresql:///curator?host=/run/postgresql&port=5433&user=dpc"
    assert read.public == read.shown and read.schema == "dpcurator"
    assert read.template.endswith("&user=dpc&password=PASSWORD")


def test_a_passfile_is_shown_by_its_path() -> None:
    url = "postgresql://dpc@db/c?passfile=/etc/dpcurator/pgpass&schema=s"
    assert location_of(url) == url == template_of(url)


def test_a_password_with_an_at_sign_is_read_whole() -> None:
    read = read_url("postgresql://dpc:Zq7Kw@Jx4Rt@db/c")
    assert read.shown == "postgresql://dpc@db/c" and read.secret_params == (
        ("password", "Zq7Kw@Jx4Rt"),
    )


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("mysql://dpc:Zq7KwJx4Rt@db/c", "ledger mysql://...: unknown kind of ledger 'mysql'"),
        ("dpc:Zq7Kw@db://x", "the ledger URL: unknown kind of ledger"),
        ("postgresql:/dpc:Zq7KwJx4Rt@db/c", "the ledger URL: write it postgresql://"),
        ("postgres//dpc:Zq7KwJx4Rt@db/c", "the ledger URL: write it postgresql://"),
    ],
)
def test_unknown_and_mistyped_urls_quote_no_secret(target: str, words: str) -> None:
    with pytest.raises(LedgerError) as info:
        target_of(target)
    assert str(info.value).startswith(words) and "Zq7Kw" not in str(info.value)


def test_files_that_look_a_little_like_urls_are_files() -> None:
    for name in ("postgres.db", "postgresql-ledger.db", "./postgresql:x.db"):
        assert target_of(name) == name


def test_a_copy_in_another_schema_keeps_every_other_part() -> None:
    url = "postgresql://dpc:Zq7Kw@db/c?sslmode=disable&schema=a&password=x"
    assert (
        with_schema(url, "b") == "postgresql://dpc:Zq7Kw@db/c?sslmode=disable&password=x&schema=b"
    )
    assert with_schema("postgresql://db/c", "b") == "postgresql://db/c?schema=b"


def test_scrub_takes_every_form_of_every_secret() -> None:
    read = read_url(f"{SHOWN}?password={quote('Zq 7Kw/é', safe='')}&sslpassword=Jx4%2BRt")
    said = "a Zq 7Kw/é b Zq%207Kw%2F%C3%A9 c Jx4+Rt d Jx4%2BRt e Zq\n 7Kw/é"
    assert scrub(said, read.secrets) == "a *** b *** c *** d *** e ***"


class DriverError(Exception):
    """A driver's error as psycopg raises it: a message, perhaps a SQLSTATE."""

    def __init__(self, text: str, sqlstate: str | None = None) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


def test_errors_matching_no_phrase_keep_no_secret() -> None:
    read = read_url(HOST.format(info=":Zq7Kw") + "?sslpassword=Jx4Rt")
    said = reword(DriverError("something new: Zq7Kw and Jx4Rt\nand more"), read)
    assert said == "driver error: something new: *** and *** and more"
    said = reword(DriverError("whatever Zq7Kw", "28P01"), read)
    assert said == "authentication failed (SQLSTATE 28P01)"


@given(st.text(min_size=1, max_size=30))
def test_a_password_hidden_in_the_user_name_is_refused_unshown(pw: str) -> None:
    """``user%3Apassword@``: libpq reads it as a user named "user:password", which every
    message would name; refused, quoting nothing of it."""
    url = f"postgresql://dpc{quote(':' + pw, safe='')}@db.example/ledger"
    with pytest.raises(LedgerError) as err:
        location_of(url)
    assert str(err.value) == (  # a fixed text: nothing of the URL in it
        "the ledger URL's user name holds a ':' (written %3A): give the password after "
        "an unencoded ':' (postgresql://user:PASSWORD@host/db), or in a passfile"
    )
