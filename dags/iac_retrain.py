"""``iac_retrain``: the interference model learns from the cluster it runs on.

``collect_runtime_pairs`` turns the throughputs the cluster measured into co-location rows
(``source=runtime``: each co-located job against its own throughput alone, ``elastico iac collect-runtime``);
``retrain`` trains a challenger on every row (the shipped and imported pairs of the profile store's
``colocation/`` folder, any extra ``data`` files, the runtime rows) except the newest runtime rows, scores
challenger and champion on those, and moves ``elastico-iac@champion`` only if the challenger is better
there (``elastico iac retrain``). Both figures, the data digest and the decision go to MLflow; a
controller started with ``--predictor auto`` plans with the new champion from its next check on.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="iac_retrain",
    description="Retrain the interference model on the cluster's own co-located pairs; promote only on a win",
    schedule="0 */3 * * *",  # every 3 hours: the period the simulated day learns with (docs/iac.md)
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["elastico", "iac"],
    params={
        "profiles": Param("", type="string", maxLength=1024, description="profile store folder (default: the shipped one)"),
        "data": Param([], type="array", items={"type": "string", "maxLength": 1024}, maxItems=32,
                      description="extra co-location files or Gavel .json tables to train on"),
        "model": Param("cf", type="string", enum=["cf", "lightgbm", "mlp", "linear"]),
        "holdout": Param(0.2, type="number", exclusiveMinimum=0, maximum=0.9),
    },
    doc_md=__doc__,
) as dag:

    @task
    def collect_runtime_pairs(params: dict | None = None) -> dict:
        """Runtime pairs from the state into ``<profiles>/colocation/runtime/pairs.parquet``."""
        from pathlib import Path

        from elastico_airflow.hooks import ElasticoHook
        from elastico_core.cli.common import default_profiles
        from elastico_core.iac.dataset import write_dataset
        from elastico_core.rst.store import ProfileStore
        from elastico_core.state.runtime_pairs import collect_runtime_pairs as collect

        assert params is not None
        folder = Path(params["profiles"] or default_profiles())
        out = folder / "colocation" / "runtime" / "pairs.parquet"
        hook = ElasticoHook()
        service = hook.open_service(hook.get_settings())
        try:
            result = collect(service.store, ProfileStore.open(folder))
        finally:
            service.close()
        if result.dataset is not None:
            write_dataset(result.dataset, out)
        elif out.exists():
            out.unlink()
        print(f"{result.pairs} runtime pairs ({result.suspect} suspect); windows skipped: {dict(result.skipped)}")
        return {"runtime": str(out) if result.dataset is not None else "", "pairs": result.pairs}

    @task
    def retrain(collected: dict, params: dict | None = None) -> dict:
        """Challenger vs champion on the newest runtime rows; the decision and both figures go to MLflow."""
        from pathlib import Path

        from elastico_airflow.hooks import ElasticoHook
        from elastico_core.cli.common import default_profiles
        from elastico_core.cli.iac import load_data
        from elastico_core.iac import registry
        from elastico_core.iac.dataset import read_dataset
        from elastico_core.iac.models import ModelKind

        assert params is not None
        folder = Path(params["profiles"] or default_profiles())
        files = sorted(str(p) for p in (folder / "colocation").glob("*.parquet")) + list(params["data"])
        if not files:
            raise ValueError(f"nothing to train on: no co-location files in {folder / 'colocation'} and no data param")
        runtime = read_dataset(collected["runtime"]) if collected.get("runtime") else None
        uri = ElasticoHook().get_settings().mlflow_tracking_uri or None
        result = registry.retrain(load_data(files, 0), runtime, ModelKind(params["model"]), holdout_fraction=float(params["holdout"]),
                                  uri=uri)
        print(f"challenger v{result.version}; champion v{result.champion}: {result.reason}")
        return result.as_dict()

    retrain(collect_runtime_pairs())
