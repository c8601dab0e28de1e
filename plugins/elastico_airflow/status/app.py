"""The status page's FastAPI app, mounted by the plugin in Airflow's api-server at ``/elastico``.

Every route depends on Airflow's own authentication (``requires_authenticated``: a Bearer token or the
UI's session cookie); without one the api-server answers 401 and nothing of the state is read. The
state is located with ``ElasticoHook`` (the ``elastico_default`` connection, then ``$ELASTICO_STATE_URL``),
and one ``JobService`` per state URL is kept for the life of the api-server process.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from airflow.api_fastapi.core_api.security import GetUserDep, requires_authenticated
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

if TYPE_CHECKING:
    from elastico_core.state import JobService

_services: dict[str, JobService] = {}
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


def _snapshot() -> dict[str, Any]:
    from elastico_airflow.status.data import status_snapshot

    svc, backend = _service()
    return status_snapshot(svc, backend=backend)


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

    @app.get("/api/status", response_class=JSONResponse)
    def status_json() -> dict[str, Any]:
        """The scheduling status as JSON (the same data as the page)."""
        return _snapshot()

    @app.get("/status", response_class=HTMLResponse)
    def status_page(user: GetUserDep) -> HTMLResponse:
        """The scheduling-status page."""
        from elastico_airflow.status.render import render_page

        return HTMLResponse(render_page(_snapshot(), user=_user_name(user)))

    @app.get("/", response_class=HTMLResponse)
    def index(user: GetUserDep) -> HTMLResponse:
        return status_page(user)

    return app
