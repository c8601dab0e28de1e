"""The one setting that locates the planner state: a database URL (SQLite file by default, PostgreSQL in production).

Precedence, applied at the edge only (the CLI, the Airflow hook): ``--state URL`` > ``$ELASTICO_STATE_URL``
> (the Airflow connection ``elastico_default``, on the Airflow side) > ``DEFAULT_STATE_URL``.
Nothing in ``elastico_core`` reads the environment; the edge passes the resolved string down.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from elastico_core.model.errors import SpecError

ENV_STATE_URL = "ELASTICO_STATE_URL"
DEFAULT_STATE_PATH = Path(".elastico") / "state.db"
DEFAULT_STATE_URL = f"sqlite:///{DEFAULT_STATE_PATH.as_posix()}"  # relative to the working directory
SUPPORTED_BACKENDS = ("sqlite", "postgresql")


def normalize_state_url(value: str | None) -> URL:
    """Parse a state URL (or a plain file path, taken as a SQLite file); ``None`` means the default file."""
    text = (value or "").strip() or DEFAULT_STATE_URL
    if "://" not in text:
        text = f"sqlite:///{Path(text).as_posix()}"
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise SpecError(f"not a database URL ({exc})", where="state URL") from None
    backend = url.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise SpecError(f"unsupported backend {backend!r} (use {' or '.join(SUPPORTED_BACKENDS)})", where="state URL")
    if backend == "postgresql" and url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg2")
    return url


# a parameter whose value is a secret wherever a driver accepts one: libpq's ``password`` and ``sslpassword``,
# tokens, keys and credentials of cloud drivers; over-redacting a harmless value is the safe mistake
SECRET_PARAM = re.compile(r"pass|pwd|secret|token|credential|api_?key|private", re.IGNORECASE)
_PARAM = re.compile(r"(?P<key>[A-Za-z_][\w.-]*)=(?P<value>[^&;\s]*)")
MASK = "***"


def redact_url(text: str) -> str:
    """A URL or connection string with every password masked: userinfo ``user:***@``, and ``password=***``,
    ``sslpassword=***`` and the like in a query string or a ``key=value`` DSN.
    """
    if "://" in text:
        scheme, rest = text.split("://", 1)
        creds, at, after = rest.rpartition("@")
        if at and ":" in creds:
            rest = f"{creds.split(':', 1)[0]}:{MASK}@{after}"
        text = f"{scheme}://{rest}"
    return _PARAM.sub(lambda m: f"{m['key']}={MASK}" if m["value"] and SECRET_PARAM.search(m["key"]) else m[0], text)


def has_secret(text: str) -> bool:
    """Whether ``redact_url`` would hide anything: such a URL must never reach a log, an env or a page."""
    return redact_url(text) != text


def redacted(url: URL | str) -> str:
    """The URL as it may appear in logs: never with its password (userinfo or query parameter)."""
    if isinstance(url, URL):
        return redact_url(url.render_as_string(hide_password=True))
    try:
        parsed = make_url(url)
    except ArgumentError:
        return redact_url(url)
    return redact_url(parsed.render_as_string(hide_password=True))
