"""The one setting that locates the planner state: a database URL (SQLite file by default, PostgreSQL in production).

Precedence, applied at the edge only (the CLI, the Airflow hook): ``--state URL`` > ``$ELASTICO_STATE_URL``
> (the Airflow connection ``elastico_default``, on the Airflow side) > ``DEFAULT_STATE_URL``.
Nothing in ``elastico_core`` reads the environment; the edge passes the resolved string down.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from elastico_core.model.errors import SpecError

ENV_STATE_URL = "ELASTICO_STATE_URL"
DEFAULT_STATE_PATH = Path(".elastico") / "state.db"
DEFAULT_STATE_URL = f"sqlite:///{DEFAULT_STATE_PATH.as_posix()}"  # relative to the working directory
SUPPORTED_BACKENDS = ("sqlite", "postgresql")


# "postgresql:/u:pw@h/db", "postgresql:u@h": a scheme of two letters or more (not "C:") without "//"
_MISTYPED_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:(?!//)")
# a libpq key=value connection string ("host=h dbname=d password=x"): not a file name
_LIBPQ_DSN = re.compile(r"(?:^|\s)(?:host|hostaddr|dbname|user|password|port|sslmode|service)\s*=", re.IGNORECASE)


def normalize_state_url(value: str | None) -> URL:
    """Parse a state URL (or a plain file path, taken as a SQLite file); ``None`` means the default file.

    Errors never quote the text: a URL the parser rejected may hold a password, and nothing derived from
    it (the text, a "file" named after it) reaches a message, a log or a file system.
    """
    text = (value or "").strip() or DEFAULT_STATE_URL
    if "\x00" in text or len(text) > MAX_URL_CHARS:
        raise SpecError(f"not a database URL (NUL byte or longer than {MAX_URL_CHARS} characters)", where="state URL")
    if "://" not in text:
        if _MISTYPED_URL.match(text):
            raise SpecError("not a database URL: a scheme must be followed by '://' (e.g. postgresql://host/db); "
                            "the value is not shown, it may hold a password", where="state URL")  # fmt: skip
        if _LIBPQ_DSN.search(text) or "@" in text or has_secret(text):
            raise SpecError("not a database URL: a libpq key=value string or a path with '@' (write "
                            "postgresql://user@host/db, or sqlite:///path for a file); the value is not shown",
                            where="state URL")  # fmt: skip
        text = f"sqlite:///{Path(text).as_posix()}"
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        raise SpecError("not a database URL (the value is not shown, it may hold a password)", where="state URL") from None
    backend = url.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise SpecError(f"unsupported backend {backend[:40]!r} (use {' or '.join(SUPPORTED_BACKENDS)})", where="state URL")
    if backend == "postgresql" and url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg2")
    return url


# a parameter whose value is a secret wherever a driver accepts one: libpq's ``password`` and ``sslpassword``,
# tokens, keys and credentials of cloud drivers; over-redacting a harmless value is the safe mistake
SECRET_PARAM = re.compile(r"pass|pwd|secret|token|credential|api_?key|private", re.IGNORECASE)
# userinfo of a URL, also when the "//" was mistyped: everything up to the last '@' of the word is hidden
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][\w+.-]*:/{0,3})(?P<user>[^:/@\s]*):(?P<secret>\S*)@")
# key=value in a query string (ends at '&') or a libpq string (spaces around '=', single-quoted values)
_PARAM = re.compile(r"(?P<key>[A-Za-z_%][\w.%+-]*)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|[^&\s]*)")
MASK = "***"
MAX_URL_CHARS = 4096


def _secret_key(key: str) -> bool:
    """Whether a parameter name is a secret's once decoded as the driver decodes it (``pass%77ord``)."""
    for _ in range(3):  # percent-encoding, even twice over
        if SECRET_PARAM.search(key):
            return True
        decoded = urllib.parse.unquote_plus(key)
        if decoded == key:
            return False
        key = decoded
    return bool(SECRET_PARAM.search(key))


def redact_url(text: str) -> str:
    """A URL, connection string or message with every password masked: userinfo ``user:***@``, and
    ``password=***``, ``sslpassword=***`` and the like in a query string (keys percent-decoded as
    SQLAlchemy decodes them) or a libpq ``key = value`` string (quoted values and separators included).
    """
    text = _USERINFO.sub(lambda m: f"{m['head']}{m['user']}:{MASK}@", text)

    def param(m: re.Match[str]) -> str:
        return f"{m['key']}{m['eq']}{MASK}" if m["value"] and _secret_key(m["key"]) else m[0]

    return _PARAM.sub(param, text)


def has_secret(text: str) -> bool:
    """Whether ``redact_url`` would hide anything: such a URL must never reach a log, an env or a page."""
    return redact_url(text) != text


def redacted(url: URL | str) -> str:
    """The URL as it may appear in logs: never with its password (userinfo or query parameter)."""
    if isinstance(url, URL):
        return redact_url(url.render_as_string(hide_password=True))
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return redact_url(url)
    return redact_url(parsed.render_as_string(hide_password=True))
