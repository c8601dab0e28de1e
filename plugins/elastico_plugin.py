"""The Airflow plugin: mounts the scheduling-status app in the api-server and links it from the menu."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from elastico_airflow.status.app import create_app

URL_PREFIX = "/elastico"


class ElasticoPlugin(AirflowPlugin):
    """``/elastico/status`` (HTML) and ``/elastico/api/status`` (JSON), both behind Airflow's authentication."""

    name = "elastico"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "ElastiCo scheduling status"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "ElastiCo scheduling",
            "href": f"{URL_PREFIX}/status",
            "destination": "nav",
            "category": "browse",
            "url_route": "elastico-status",
        }
    ]
