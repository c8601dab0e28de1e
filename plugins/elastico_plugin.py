"""The Airflow plugin: mounts the scheduling-status app in the api-server, puts it in Airflow's menu, and links
each ElastiCo task to its job's status and MLflow run.

The menu entry is a ``react_apps`` entry (as the provider UIs do it): Airflow renders the component inside
its own page, so the status page's links open in the top window — an ``external_views`` entry would show
the page in a sandboxed iframe whose links cannot leave it. The same page stays at ``/elastico/status``.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from elastico_airflow.links import ElasticoJobLink, MlflowRunLink
from elastico_airflow.status.app import create_app

URL_PREFIX = "/elastico"
MENU_NAME = "ElastiCo scheduling"  # also the global the bundle registers its component under


class ElasticoPlugin(AirflowPlugin):
    """``/elastico/status`` (HTML), ``/elastico/api/status`` (JSON), the menu entry and the operator links."""

    name = "elastico"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "ElastiCo scheduling status"}]  # noqa: RUF012
    react_apps = [  # noqa: RUF012
        {
            "name": MENU_NAME,
            "bundle_url": f"{URL_PREFIX}/static/status-app.js",
            "destination": "nav",
            "category": "browse",
            "url_route": "elastico-status",
        }
    ]
    operator_extra_links = [ElasticoJobLink(), MlflowRunLink()]  # noqa: RUF012
