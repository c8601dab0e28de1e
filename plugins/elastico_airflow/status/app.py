"""The status page's FastAPI app, mounted by the plugin in Airflow's api-server at ``/elastico``.

Every route depends on Airflow's own authentication (``requires_authenticated``: a Bearer token or the
UI's session cookie); without one nothing of the state is read: the JSON route answers 401, the page
redirects to Airflow's login (which brings the user back to the page). What an authenticated user
sees is filtered by their permissions (``permissions``: the jobs of the DAGs they may read). The
state is located with ``ElasticoHook`` (the ``elastico_default`` connection, then ``$ELASTICO_STATE_URL``),
and one ``JobService`` per state URL is kept for the life of the api-server process.
"""

from __future__ import annotations

import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

from airflow.api_fastapi.core_api.security import GetUserDep, requires_authenticated
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

if TYPE_CHECKING:
    from elastico_core.state import JobService

_services: dict[str, JobService] = {}
_links: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def _service() -> tuple[JobService, str]:
    from elastico_airflow.hooks import ElasticoHook

    settings = ElasticoHook().get_settings()
    with _lock:
        svc = _services.get(settings.state_url)
        if svc is None:
            svc = ElasticoHook.open_service(settings)
            _services[settings.state_url] = svc
    backend = settings.state_url.split(":", 1)[0].split("+", 1)[0]
    return svc, backend


def _airflow_base() -> str:
    """The path the Airflow UI is served under (``[api] base_url``'s path; empty at the root)."""
    from airflow.configuration import conf

    return urllib.parse.urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def _mlflow_links() -> dict[str, str]:
    from elastico_airflow.hooks import ElasticoHook
    from elastico_airflow.tracking import RunLinks

    settings = ElasticoHook().get_settings()
    key = (settings.mlflow_tracking_uri, settings.mlflow_ui_url)
    with _lock:
        links = _links.setdefault(key, RunLinks(*key))
    return links.get()  # type: ignore[no-any-return]


def _snapshot(user: Any) -> dict[str, Any]:
    from elastico_airflow.status.data import status_snapshot
    from elastico_airflow.status.permissions import dags_of, viewer_of, visible

    svc, backend = _service()
    data = status_snapshot(svc, backend=backend, airflow_base=_airflow_base(), mlflow_links=_mlflow_links())
    return visible(data, viewer_of(user), lambda ids: dags_of(svc, ids))


def login_redirect(request: Request) -> RedirectResponse:
    """Airflow's login page, coming back to the page asked for (relative: no host from the request is trusted)."""
    from airflow.api_fastapi.app import get_auth_manager

    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(get_auth_manager().get_url_login(next_url=target), status_code=303)


def _user_name(user: Any) -> str:
    getter = getattr(user, "get_name", None)
    return str(getter()) if callable(getter) else str(getattr(user, "username", ""))


def create_app() -> FastAPI:
    """The sub-application (its own OpenAPI page stays off: the api-server documents its own API)."""
    app = FastAPI(
        title="ElastiCo scheduling status",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(requires_authenticated())],
    )

    @app.exception_handler(StarletteHTTPException)
    async def unauthenticated(request: Request, exc: StarletteHTTPException) -> Response:
        """A person opening the page without a session is sent to the login; API callers get the status code."""
        wants_page = not request.url.path.rstrip("/").endswith("/api/status") and "text/html" in request.headers.get(
            "accept", ""
        )
        if exc.status_code == 401 and wants_page:
            return login_redirect(request)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.get("/api/status", response_class=JSONResponse)
    def status_json(user: GetUserDep) -> dict[str, Any]:
        """The scheduling status as JSON (the same data as the page), as far as ``user`` may see it."""
        return _snapshot(user)

    @app.get("/status", response_class=HTMLResponse)
    def status_page(user: GetUserDep) -> HTMLResponse:
        """The scheduling-status page."""
        from elastico_airflow.status.render import render_page

        return HTMLResponse(render_page(_snapshot(user), user=_user_name(user)))

    @app.get("/", response_class=HTMLResponse)
    def index(user: GetUserDep) -> HTMLResponse:
        return status_page(user)

    return app
