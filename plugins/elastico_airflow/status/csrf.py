"""CSRF tokens for the status page's one write (cancel): bound to the signed-in user, expiring, HMAC-signed.

Airflow's session is an HttpOnly cookie with ``SameSite=Lax``; a page on another port of the same host is
"same-site" and would still send it. So a cancel needs more than the cookie: a token the page got from a
GET that only Airflow's authenticated user could read, sent back in a header (``X-ElastiCo-CSRF``) that a
cross-site form cannot set, plus an ``Origin`` that is the api-server's own. The key is derived from the
api-server's JWT secret (else its ``[api] secret_key``), so every api-server worker accepts every token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

HEADER = "X-ElastiCo-CSRF"
TTL_S = 8 * 3600
_fallback = secrets.token_bytes(32)  # one process without a configured secret: tokens still work within it


def _key() -> bytes:
    from airflow.configuration import conf

    secret = conf.get("api_auth", "jwt_secret", fallback="") or conf.get("api", "secret_key", fallback="")
    if not secret:
        return _fallback
    return hashlib.sha256(b"elastico-status-csrf\x00" + secret.encode()).digest()


def mint(user: str, now: float | None = None) -> str:
    """A token for ``user`` valid ``TTL_S`` seconds: ``<expiry>.<hex mac>``."""
    expiry = int((now if now is not None else time.time()) + TTL_S)
    mac = hmac.new(_key(), f"{user}\x00{expiry}".encode(), hashlib.sha256).hexdigest()
    return f"{expiry}.{mac}"


def valid(token: str | None, user: str, now: float | None = None) -> bool:
    """Whether ``token`` was minted for ``user`` and has not expired (constant-time comparison)."""
    if not token or "." not in token or len(token) > 200:
        return False
    expiry_text, mac = token.split(".", 1)
    try:
        expiry = int(expiry_text)
    except ValueError:
        return False
    if expiry < (now if now is not None else time.time()):
        return False
    want = hmac.new(_key(), f"{user}\x00{expiry}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, mac)


def same_origin(origin: str | None, host: str | None, scheme: str) -> bool:
    """A request whose ``Origin`` (when the browser sent one) is this server; no ``Origin`` passes (a
    same-origin ``fetch`` of an old browser, a script with a token): the header token is what guards it."""
    if not origin:
        return True
    return bool(host) and origin.rstrip("/") in (f"{scheme}://{host}", f"http://{host}", f"https://{host}")
