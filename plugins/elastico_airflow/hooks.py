"""``ElasticoHook``: locates the planner state (and the launch settings) through the ``elastico_default`` connection.

Stateless, as Airflow asks of hooks: every call resolves the connection again and returns plain values or a
``JobService`` the caller owns (and closes). A missing connection is not an error: the embedded default
falls back to ``$ELASTICO_STATE_URL`` and then to the SQLite file ``.elastico/state.db``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowNotFoundException
from airflow.sdk import BaseHook

from elastico_airflow.settings import ConnectionFields, ElasticoSettings, resolve_settings

if TYPE_CHECKING:
    from elastico_core.state import JobService


def _fields(conn: Any) -> ConnectionFields:
    return ConnectionFields(
        conn_type=conn.conn_type or "",
        host=conn.host or "",
        schema=conn.schema or "",
        login=conn.login or "",
        password=conn.password or "",
        port=conn.port,
        extra=conn.extra or None,
    )


class ElasticoHook(BaseHook):
    """Resolve ``elastico_default`` into ``ElasticoSettings`` and open the planner state.

    :param elastico_conn_id: the connection; its extra may hold ``state_url``, ``launcher``, ``namespace``,
        ``image``, ``sharing``, ``workdir``, ``workload_env``, ``gpu_uuids``, ``run_volume_claim``,
        ``state_url_secret``, ``service_account``, ``image_pull_secrets``, ``mlflow_tracking_uri``, ``labels``.
    """

    conn_name_attr = "elastico_conn_id"
    default_conn_name = "elastico_default"
    conn_type = "elastico"
    hook_name = "ElastiCo planner state"

    def __init__(self, elastico_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.elastico_conn_id = elastico_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["port", "login", "schema"],
            "relabeling": {
                "host": "State URL (sqlite:///... or postgresql://...)",
                "password": "Password (PostgreSQL)",
            },
        }

    def get_settings(self) -> ElasticoSettings:
        try:
            conn = self.get_connection(self.elastico_conn_id)
        except AirflowNotFoundException:
            return resolve_settings(None, os.environ)
        return resolve_settings(_fields(conn), os.environ)

    async def aget_settings(self) -> ElasticoSettings:
        """The same, for a trigger's event loop (the sync lookup must not run on it)."""
        try:
            conn = await self.aget_connection(self.elastico_conn_id)
        except AirflowNotFoundException:
            return resolve_settings(None, os.environ)
        return resolve_settings(_fields(conn), os.environ)

    @staticmethod
    def open_service(settings: ElasticoSettings) -> JobService:
        """A ``JobService`` on the settings' state (migrated if new). The caller closes it."""
        from elastico_core.state import JobService

        return JobService.open(settings.state_url)

    def get_service(self) -> JobService:
        return self.open_service(self.get_settings())

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's *Test* button: reads the state, never creates or migrates one (``state.probe``)."""
        from elastico_core.state import JobService, StateStore
        from elastico_core.state.probe import NoState, read_only_url, require_state

        settings = self.get_settings()
        try:
            found = require_state(settings.state_url)
            svc = JobService(StateStore.open(read_only_url(found.url), upgrade=False))
        except NoState as exc:
            return False, str(exc)
        except Exception as exc:
            return False, f"cannot open {settings.state_url_redacted}: {type(exc).__name__}"
        try:
            counts = svc.counts()
        finally:
            svc.close()
        return True, f"{settings.state_url_redacted}: {sum(counts.values())} jobs"
