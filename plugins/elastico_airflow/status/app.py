"""The status page's FastAPI app, mounted by the plugin in Airflow's api-server at ``/elastico``.

Every route depends on Airflow's own authentication (``requires_authenticated``: a Bearer token or the
UI's session cookie); without one nothing of the state is read: the JSON route answers 401, the page
redirects to Airflow's login (which brings the user back to the page). What an authenticated user
sees is filtered by their permissions (``permissions``: the jobs of the DAGs they may read). The state
is located with ``ElasticoHook`` (the ``elastico_default`` connection, then ``$ELASTICO_STATE_URL``) and
read through a read-only ``JobService`` kept per state URL for the life of the api-server process: a page
view never creates, migrates or writes a state. The one write is a cancel (``POST /api/jobs/{id}/cancel``):
the user must be allowed to change the job's DAG runs, and the request must carry the page's CSRF token.

Routes: ``/status`` (the page), ``/status/fragment`` (its body, which the React app in Airflow's menu
shows), ``/api/status`` (the same data as JSON), ``/static/status-app.js`` (that React app).
"""

from __future__ import annotations

import threading
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.api_fastapi.core_api.security import GetUserDep, requires_authenticated
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from elastico_airflow.status import csrf
from elastico_airflow.status.cancel import may_cancel, user_name

if TYPE_CHECKING:
    from elastico_core.state import JobFilter, JobService

STATIC = Path(__file__).resolve().parent / "static"
_readers: dict[str, JobService] = {}
_links: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


class NoStateYet(Exception):
    """The connection names no ElastiCo state yet (the controller creates it): the page says so."""


def _backend(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]


def _reader() -> tuple[JobService, str]:
    """The read-only service of the configured state (opened once per URL); ``NoStateYet`` if there is none."""
    from elastico_airflow.hooks import ElasticoHook
    from elastico_core.state import JobService, StateStore
    from elastico_core.state.probe import Found, probe, read_only_url

    url = ElasticoHook().get_settings().state_url
    with _lock:
        svc = _readers.get(url)
    if svc is None:
        found = probe(url)
        if found.found is not Found.ELASTICO:
            raise NoStateYet(found.refusal() or "no ElastiCo state yet: start the controller (it creates the state)")
        svc = JobService(StateStore.open(read_only_url(found.url), upgrade=False))
        with _lock:
            svc = _readers.setdefault(url, svc)
    return svc, _backend(url)


def _writer() -> JobService:
    """A service that may write (a cancel), on an existing state only; the caller closes it."""
    from elastico_airflow.hooks import ElasticoHook
    from elastico_core.state import JobService, StateStore
    from elastico_core.state.probe import require_state

    found = require_state(ElasticoHook().get_settings().state_url)
    return JobService(StateStore.open(found.url, upgrade=False))


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


def _filter(request: Request) -> JobFilter:
    from elastico_core.state import JobFilter

    q = request.query_params
    return JobFilter(user=(q.get("user") or "").strip()[:128], dag=(q.get("dag") or "").strip()[:250],
                     queue=(q.get("queue") or "").strip()[:63], job=(q.get("job") or "").strip()[:253])


def _snapshot(user: Any, where: JobFilter | None = None) -> dict[str, Any]:
    from elastico_airflow.status.data import status_snapshot
    from elastico_airflow.status.permissions import dags_of, viewer_of, visible

    svc, backend = _reader()
    data = status_snapshot(svc, backend=backend, airflow_base=_airflow_base(), mlflow_links=_mlflow_links(),
                           where=where)
    return visible(data, viewer_of(user), lambda ids: dags_of(svc, ids))


def login_redirect(request: Request) -> RedirectResponse:
    """Airflow's login page, coming back to the page asked for (relative: no host from the request is trusted)."""
    from airflow.api_fastapi.app import get_auth_manager

    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(get_auth_manager().get_url_login(next_url=target), status_code=303)


def _page_context(user: Any) -> dict[str, Any]:
    return {"user": user_name(user), "csrf": csrf.mint(user_name(user)), "base": _airflow_base()}


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
        wants_page = "/api/" not in request.url.path and "text/html" in request.headers.get("accept", "")
        if exc.status_code == 401 and wants_page:
            return login_redirect(request)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.get("/api/status", response_class=JSONResponse)
    def status_json(request: Request, user: GetUserDep) -> Response:
        """The scheduling status as JSON (the same data as the page; ``?user=&dag=&queue=`` filter the jobs),
        as far as ``user`` may see it."""
        try:
            return JSONResponse(_snapshot(user, _filter(request)))
        except NoStateYet as exc:
            return JSONResponse({"detail": str(exc)}, status_code=503)

    def _render(request: Request, user: Any, *, fragment: bool) -> HTMLResponse:
        from elastico_airflow.status.render import render_fragment, render_missing, render_page

        ctx = _page_context(user)
        try:
            data = _snapshot(user, _filter(request))
        except NoStateYet as exc:
            return HTMLResponse(render_missing(str(exc), fragment=fragment))
        if fragment:
            return HTMLResponse(render_fragment(data, **ctx))
        return HTMLResponse(render_page(data, **ctx))

    @app.get("/status", response_class=HTMLResponse)
    def status_page(request: Request, user: GetUserDep) -> HTMLResponse:
        """The scheduling-status page (standalone; Airflow's menu shows its body through the React app)."""
        return _render(request, user, fragment=False)

    @app.get("/status/fragment", response_class=HTMLResponse)
    def status_fragment(request: Request, user: GetUserDep) -> HTMLResponse:
        """The page's body, for the React app that shows it inside Airflow's own page."""
        return _render(request, user, fragment=True)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: GetUserDep) -> HTMLResponse:
        return status_page(request, user)

    @app.get("/static/status-app.js")
    def status_app() -> Response:
        """The React component Airflow's menu entry renders (a hand-written ES module on the host's React)."""
        return Response((STATIC / "status-app.js").read_text(encoding="utf-8"), media_type="text/javascript",
                        headers={"Cache-Control": "no-cache"})

    @app.post("/api/jobs/{job_id}/cancel", response_class=JSONResponse)
    def cancel_job(job_id: str, request: Request, user: GetUserDep) -> JSONResponse:
        """Cancel one job: the user may change its DAG's runs, the request carries the page's token."""
        from elastico_core.state import UnknownJob

        name = user_name(user)
        if not csrf.valid(request.headers.get(csrf.HEADER), name) or not csrf.same_origin(
                request.headers.get("origin"), request.headers.get("host"), request.url.scheme):
            return JSONResponse({"detail": "missing or invalid CSRF token: reload the page"}, status_code=403)
        try:
            svc = _writer()
        except Exception as exc:
            return JSONResponse({"detail": f"the state cannot be changed now: {exc}"}, status_code=503)
        try:
            try:
                job = svc.get(job_id)
            except UnknownJob:
                return JSONResponse({"detail": f"no job {job_id!r}"}, status_code=404)
            if not may_cancel(user, job):
                return JSONResponse({"detail": f"{name} may not change runs of {job.identity.dag_id or 'every DAG'}"},
                                    status_code=403)
            before = job.status.value
            after = svc.cancel(job_id, f"cancelled by {name} from the status page")
        finally:
            svc.close()
        return JSONResponse({"id": job_id, "was": before, "status": after.status.value})

    return app
