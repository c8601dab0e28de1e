"""The planner's persistent state and the controller (SQLAlchemy; SQLite by default, PostgreSQL in production).

Public surface (everything else in this package is internal and may change behind a migration):

* ``JobService`` — register/read/report/cancel jobs; the only door the Airflow side and the CLI use;
* the frozen values it returns: ``JobView``, ``PlanView``, ``RegisterResult``, ``GpuView``,
  ``DecisionView``, ``PriceView``, ``MeasurementView``, ``JobStatus``, ``DecisionKind``, ``ExternalIdentity``;
* its errors: ``StateError``, ``UnknownJob``, ``StateConflict``, ``SchemaMismatch`` (and ``SpecError``);
* ``StateStore`` / ``upgrade_state`` — open and migrate a state database; ``normalize_state_url`` and
  ``DEFAULT_STATE_URL`` / ``ENV_STATE_URL`` — the one setting that locates it;
* ``Controller`` / ``ControllerConfig`` — the planning loop (``elastico controller run``).

Importing this package does not import the planner (numpy, polars): ``elastico_core.state.controller``
does, on demand, so a DAG file or an Airflow trigger stays cheap to import.
"""

from elastico_core.state.db import StateStore
from elastico_core.state.errors import LeaseLost, SchemaMismatch, StateConflict, StateError, UnknownJob
from elastico_core.state.service import JobService
from elastico_core.state.url import DEFAULT_STATE_URL, ENV_STATE_URL, normalize_state_url, redacted
from elastico_core.state.values import (
    DecisionKind,
    DecisionView,
    ExternalIdentity,
    GpuView,
    IdentitySource,
    JobFilter,
    JobStatus,
    JobView,
    MeasurementView,
    PlanView,
    PriceView,
    Progress,
    RegisterResult,
)


def upgrade_state(url: str | None = None) -> str:
    """Migrate the state at ``url`` (None: the default SQLite file) to the newest schema; returns its revision."""
    from elastico_core.state import migrate
    from elastico_core.state.db import make_engine, unavailable

    parsed = normalize_state_url(url)
    engine = make_engine(parsed)
    try:
        return migrate.upgrade(engine)
    except Exception as exc:
        if (err := unavailable(exc, parsed)) is not None:
            raise err from None
        raise
    finally:
        engine.dispose()


def __getattr__(name: str) -> object:
    if name in ("Controller", "ControllerConfig", "EpochReport"):
        from elastico_core.state import controller

        return getattr(controller, name)
    raise AttributeError(name)


__all__ = [
    "DEFAULT_STATE_URL",
    "ENV_STATE_URL",
    "DecisionKind",
    "DecisionView",
    "ExternalIdentity",
    "GpuView",
    "IdentitySource",
    "JobFilter",
    "JobService",
    "JobStatus",
    "JobView",
    "LeaseLost",
    "MeasurementView",
    "PlanView",
    "PriceView",
    "Progress",
    "RegisterResult",
    "SchemaMismatch",
    "StateConflict",
    "StateError",
    "StateStore",
    "UnknownJob",
    "normalize_state_url",
    "redacted",
    "upgrade_state",
]
