"""Who may see what on the status page: Airflow's own permissions, applied to the snapshot before it is served.

Logging in is not enough: the page names jobs, DAGs, runs, task links, placements and the platform's
own files. The rule follows Airflow's convention for its own API (``/api/v2/dags`` lists only
``get_authorized_dag_ids``), through whatever auth manager the deployment runs (Simple, FAB, Keycloak,
teams included):

* a job registered by an Airflow task is shown to a user the auth manager lets read that DAG;
* everything else — jobs submitted outside Airflow (``elastico jobs submit``), jobs naming a DAG Airflow
  does not know, and the profile-store notes that name files on the server — to a user who may read the
  connection that locates the state (``elastico_default``): whoever may see where the state lives may
  see all of it (with SimpleAuthManager: OP and ADMIN);
* aggregates carry no identity and are shown to every authenticated user: job counts, each GPU's and
  node's occupancy (another user's job appears as a count, ``hidden_jobs``, and in the memory figures),
  and the market's prices.

A user without a role sees the aggregates only. Where a visible job's text names a hidden one (a reason
"admitted beside cli-job", a partner list), the name becomes "another job". Filtering is a pure function
of the snapshot and a ``Viewer`` (``visible``), so it is tested without a server; ``viewer_of`` asks the
auth manager.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ROW_LISTS = ("running", "queue", "finished")  # lists of job rows (each with "id" and "dag_id")
JOB_ID_LISTS = ("decisions", "slowdowns")  # lists of records naming a job by "job_id"
PLATFORM_ONLY = ("profile_problems", "iac_notes")


@dataclass(frozen=True, slots=True)
class Viewer:
    """What one user may see: the DAGs whose jobs they may read, and whether they see the platform's part."""

    dags: frozenset[str]
    platform: bool = False  # jobs outside Airflow (or of DAGs it does not know) and the platform's notes

    def sees(self, dag_id: str | None) -> bool:
        """Whether a job of ``dag_id`` (None: not registered by Airflow) is visible to this viewer."""
        return self.platform or (dag_id is not None and dag_id in self.dags)


def viewer_of(user: Any, conn_id: str = "elastico_default") -> Viewer:
    """Ask the api-server's auth manager what ``user`` may read (never raises: no answer means nothing)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

    manager = get_auth_manager()
    try:
        dags = frozenset(manager.get_authorized_dag_ids(user=user, method="GET"))
    except Exception:  # an auth manager that cannot answer: the user sees no DAG's jobs
        dags = frozenset()
    try:
        platform = bool(manager.is_authorized_connection(method="GET", details=ConnectionDetails(conn_id=conn_id), user=user))
    except Exception:
        platform = False
    return Viewer(dags, platform)


def dags_of(svc: Any, job_ids: Iterable[str]) -> dict[str, str | None]:
    """The DAG of each job (None: registered outside Airflow, or gone)."""
    found = svc.get_many(job_ids)
    return {j: (found[j].identity.dag_id or None) if j in found else None for j in job_ids}


def visible(snapshot: Mapping[str, Any], viewer: Viewer, dag_of: Callable[[Iterable[str]], Mapping[str, str | None]]) -> dict[str, Any]:
    """``snapshot`` (``status_snapshot``'s data) with what ``viewer`` may not see left out.

    :param dag_of: the DAG of each job id (None when it was not registered by Airflow) for job ids the
        snapshot names without a row (decisions and measurements of jobs no longer listed).
    """
    if viewer.platform:
        return dict(snapshot)
    rows: dict[str, str | None] = {}
    for name in ROW_LISTS:
        rows.update({r["id"]: r.get("dag_id") for r in snapshot.get(name) or ()})
    for gpu in snapshot.get("gpus") or ():
        rows.update({j["id"]: j.get("dag_id") for j in gpu.get("jobs") or () if "dag_id" in j})
    named = {rec.get("job_id") for name in JOB_ID_LISTS for rec in snapshot.get(name) or ()}
    on_gpus = {j["id"] for g in snapshot.get("gpus") or () for j in g.get("jobs") or ()}
    on_nodes = {j["id"] for n in snapshot.get("nodes") or () for j in n.get("jobs") or ()}
    unknown = sorted(j for j in named | on_gpus | on_nodes if isinstance(j, str) and j not in rows)
    if unknown:
        rows.update(dag_of(unknown))
    shown = {job_id for job_id, dag in rows.items() if viewer.sees(dag)}

    hidden = sorted((j for j in rows if j not in shown), key=len, reverse=True)
    out = dict(snapshot)
    for name in ROW_LISTS:
        out[name] = [r for r in snapshot.get(name) or () if r["id"] in shown]
    for name in JOB_ID_LISTS:
        out[name] = [r for r in snapshot.get(name) or () if r.get("job_id") in shown]
    for name in ("gpus", "nodes"):
        out[name] = [_holder(h, shown) for h in snapshot.get(name) or ()]
    for name in PLATFORM_ONLY:
        if name in out:
            out[name] = []
    if "choices" in out:  # the filter's drop-downs offer the users, DAGs and queues of the jobs shown only
        rows_shown = [r for name in ROW_LISTS for r in out.get(name) or ()]
        out["choices"] = {
            "user": sorted({r["user"] for r in rows_shown if r.get("user")}),
            "dag": sorted({r["dag_id"] for r in rows_shown if r.get("dag_id")}),
            "queue": sorted({r["queue"] for r in rows_shown if r.get("queue")}),
        }
    return _scrub(out, hidden) if hidden else out


ANOTHER = "another job"


def _scrub(value: Any, hidden: list[str]) -> Any:
    """``value`` with every hidden job id in its text replaced by "another job" (whole ids only)."""
    pattern = re.compile("|".join(rf"(?<![\w.:-]){re.escape(j)}(?![\w.:-])" for j in hidden))

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return pattern.sub(ANOTHER, v)
        if isinstance(v, Mapping):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


def _holder(holder: Mapping[str, Any], shown: set[str]) -> dict[str, Any]:
    """A GPU or node with the jobs the viewer may not see counted, not named."""
    jobs = list(holder.get("jobs") or ())
    mine = [j for j in jobs if j.get("id") in shown]
    return {**holder, "jobs": mine, "hidden_jobs": len(jobs) - len(mine)}
