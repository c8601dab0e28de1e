"""The one MLflow door of the simulator: log a simulation run (params, metrics, report, plots).

Imported only when logging is wanted, so ``elastico simulate --no-mlflow`` never loads mlflow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

EXPERIMENT = "elastico-simulate"


def log_run(
    *,
    tracking_uri: str,
    artifact_root: Path | None,
    run_name: str,
    params: Mapping[str, object],
    metrics: Mapping[str, float],
    artifacts: Sequence[Path],
    tags: Mapping[str, str] | None = None,
    experiment: str = EXPERIMENT,
    steps: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> str:
    """Log one run and return its id. ``artifact_root`` is used when the experiment is first created
    (a local folder, e.g. ``.elastico/mlartifacts``); an existing experiment keeps its own location.
    ``steps``: series logged as one metric's steps (a several-seed run: step = seed), under ``<key>.by_step``."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        location = artifact_root.resolve().as_uri() if artifact_root is not None else None
        if artifact_root is not None:
            artifact_root.mkdir(parents=True, exist_ok=True)
        exp_id = mlflow.create_experiment(experiment, artifact_location=location,
                                          tags={"mlflow.experimentKind": "custom_model_development"})
    else:
        exp_id = exp.experiment_id
    with mlflow.start_run(experiment_id=exp_id, run_name=run_name) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        clean = {k: float(v) for k, v in metrics.items() if v == v and abs(float(v)) != float("inf")}
        if clean:
            mlflow.log_metrics(clean)
        by_step: dict[int, dict[str, float]] = {}
        for key, series in (steps or {}).items():
            for step, value in series:
                if value == value and abs(value) != float("inf"):
                    by_step.setdefault(int(step), {})[f"{key}.by_step"] = float(value)
        for step, values in by_step.items():  # one batch per step
            mlflow.log_metrics(values, step=step)
        if tags:
            mlflow.set_tags(dict(tags))
        for path in artifacts:
            if path.is_file():
                mlflow.log_artifact(str(path))
        return str(run.info.run_id)
