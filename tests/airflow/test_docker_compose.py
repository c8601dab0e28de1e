"""docker-compose.yaml parses and wires the services as docs/airflow.md describes (no Docker engine needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.airflow.conftest import REPO

AIRFLOW = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
VAR = re.compile(r"\$\{([A-Z0-9_]+)(?::([-?])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable syntax: ``${X}``, ``${X:-default}``, ``${X:?error}``, ``$$``."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == "?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == "-" else ""

    return VAR.sub(one, text).replace("$$", "$")


ENV = {"AIRFLOW_FERNET_KEY": "f" * 44, "AIRFLOW_JWT_SECRET": "j" * 64, "POSTGRES_PASSWORD": "p"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    raw = (REPO / "docker-compose.yaml").read_text()
    return yaml.safe_load(interpolate(raw, ENV))


def test_required_secrets_have_no_defaults() -> None:
    raw = (REPO / "docker-compose.yaml").read_text()
    for name in ENV:
        with pytest.raises(KeyError, match=name):
            interpolate(raw, {k: v for k, v in ENV.items() if k != name})


def test_services_and_their_commands(compose: dict[str, Any]) -> None:
    s = compose["services"]
    assert set(s) == {"postgres", "airflow-init", *AIRFLOW, "mlflow", "elastico-controller", "redis", "airflow-worker"}
    assert s["airflow-apiserver"]["command"][:2] == ["airflow", "api-server"]
    assert s["airflow-scheduler"]["command"] == ["airflow", "scheduler"]
    assert s["airflow-dag-processor"]["command"] == ["airflow", "dag-processor"]
    assert s["airflow-triggerer"]["command"] == ["airflow", "triggerer"]
    assert (
        "airflow db migrate" in s["airflow-init"]["command"][-1]
        and "elastico state upgrade" in s["airflow-init"]["command"][-1]
    )
    ctl = s["elastico-controller"]["command"]
    assert ctl[:3] == ["elastico", "controller", "run"] and "--cluster" in ctl and "--interval" in ctl
    ml = s["mlflow"]["command"]
    assert ml[:2] == ["mlflow", "server"]
    assert ml[ml.index("--backend-store-uri") + 1].startswith("postgresql+psycopg2://mlflow:")
    assert ml[ml.index("--artifacts-destination") + 1] == "/mlflow/artifacts"
    assert any(v.startswith("mlflow-artifacts:/mlflow/artifacts") for v in s["mlflow"]["volumes"])


def test_dependencies(compose: dict[str, Any]) -> None:
    s = compose["services"]
    assert s["postgres"]["healthcheck"]["test"][-1].startswith("pg_isready")
    assert s["airflow-init"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in (*AIRFLOW, "elastico-controller"):
        deps = s[name]["depends_on"]
        assert deps["postgres"] == {"condition": "service_healthy"}, name
        assert deps["airflow-init"] == {"condition": "service_completed_successfully"}, name
    assert s["airflow-scheduler"]["depends_on"]["airflow-apiserver"] == {"condition": "service_healthy"}
    assert s["mlflow"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}


def test_airflow_components_share_one_configuration(compose: dict[str, Any]) -> None:
    s = compose["services"]
    envs = [s[n]["environment"] for n in AIRFLOW]
    for key in (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__CORE__EXECUTOR",
        "AIRFLOW_CONN_ELASTICO_DEFAULT",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    ):
        assert len({e[key] for e in envs}) == 1, key
    e = envs[0]
    assert e["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:")
    assert e["AIRFLOW__CORE__EXECUTOR"] == "elastico_airflow.executors.PreloadedLocalExecutor" and e["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    for n in AIRFLOW:
        vols = s[n]["volumes"]
        assert "./dags:/opt/elastico/src/dags:ro" in vols and "./plugins:/opt/elastico/src/plugins:ro" in vols
        assert any(v.endswith(":/opt/elastico/kube:ro") for v in vols)
    assert e["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/elastico/src/dags"
    assert e["AIRFLOW__CORE__PLUGINS_FOLDER"] == "/opt/elastico/src/plugins"
    for n in ("airflow-apiserver", "mlflow"):
        assert all(p.startswith("127.0.0.1:") for p in s[n]["ports"]), n


def test_the_connections_resolve_and_agree_with_the_controller(compose: dict[str, Any]) -> None:
    from elastico_airflow.settings import ConnectionFields, GpuSharing, Launcher, resolve_settings

    s = compose["services"]
    env = s["airflow-scheduler"]["environment"]
    conn = json.loads(env["AIRFLOW_CONN_ELASTICO_DEFAULT"])
    settings = resolve_settings(ConnectionFields(conn_type=conn["conn_type"], extra=conn["extra"]), {})
    assert settings.launcher is Launcher.KUBERNETES and settings.sharing is GpuSharing.HAMI
    assert settings.state_url == s["elastico-controller"]["environment"]["ELASTICO_STATE_URL"]
    assert settings.state_url == s["airflow-init"]["environment"]["ELASTICO_STATE_URL"]
    assert (
        settings.mlflow_tracking_uri == "http://mlflow:5000" and settings.state_url_secret and settings.run_volume_claim
    )
    kube = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert kube["conn_type"] == "kubernetes" and kube["extra"]["kube_config_path"] == "/opt/elastico/kube/config"


def test_databases_exist_for_every_url(compose: dict[str, Any]) -> None:
    sql = (REPO / "docker" / "postgres-init.sh").read_text()
    created = set(re.findall(r"CREATE DATABASE (\w+)", sql))
    text = json.dumps(compose)
    used = set(re.findall(r"postgresql\+psycopg2://\w+:[^@]*@postgres:5432/(\w+)", text))
    assert used == created == {"airflow", "elastico", "mlflow"}
    pg = compose["services"]["postgres"]["environment"]
    for db in created:  # the passwords the init script sets are the ones the URLs use
        password = pg[f"{db.upper()}_DB_PASSWORD"]
        assert f"://{db}:{password}@postgres:5432/{db}" in text, db
    build = compose["services"]["airflow-apiserver"]["build"]
    assert (REPO / build["context"] / build["dockerfile"]).exists()
    mounted = [v.split(":")[0] for v in compose["services"]["elastico-controller"]["volumes"]]
    assert (REPO / Path(mounted[0])).exists()  # the default cluster file


PROJECT_IMAGE_SERVICES = ("airflow-init", *AIRFLOW, "mlflow", "elastico-controller")


def test_every_service_of_the_project_image_builds_it(compose: dict[str, Any]) -> None:
    """No registry holds the project image: a service that names it without ``build:`` would be pulled."""
    s = compose["services"]
    for name in PROJECT_IMAGE_SERVICES:
        assert s[name]["image"].startswith("elastico-airflow"), name
        assert s[name]["build"] == {"context": ".", "dockerfile": "docker/Dockerfile"}, name
    assert "build" not in s["postgres"]


def test_mlflow_allows_the_host_header_the_other_containers_send(compose: dict[str, Any]) -> None:
    """Checked with MLflow's own DNS-rebinding guard: ``mlflow:5000`` (service name) and the published port pass."""
    from mlflow.server.security_utils import is_allowed_host_header

    ml = compose["services"]["mlflow"]["command"]
    allowed = [h.strip() for h in ml[ml.index("--allowed-hosts") + 1].split(",")]
    tracking = compose["services"]["elastico-controller"]["environment"]["MLFLOW_TRACKING_URI"]
    host = tracking.split("//", 1)[1].split("/", 1)[0]
    assert host == "mlflow:5000"
    for ok in (host, "127.0.0.1:5000", "localhost:5000"):
        assert is_allowed_host_header(allowed, ok), ok
    assert not is_allowed_host_header(allowed, "evil.example:5000")


def test_dockerignore_keeps_secrets_and_environments_out_of_the_image() -> None:
    lines = [
        x.strip() for x in (REPO / ".dockerignore").read_text().splitlines() if x.strip() and not x.startswith("#")
    ]
    for path in (".git", ".venv", ".airflow", ".elastico", ".env", ".mlflow"):
        assert path in lines, path
    dockerfile = (REPO / "docker/Dockerfile").read_text()
    assert "COPY" in dockerfile


def test_credentials_and_compose_version_are_documented_truthfully() -> None:
    raw = (REPO / "docker-compose.yaml").read_text()
    assert raw.splitlines()[0].startswith("#") and "Compose v2" in raw and "name: elastico" in raw
    assert "user:ROLE" in raw and "simple_auth_manager_passwords.json.generated" in raw
    example = (REPO / "docs/compose.env.example").read_text()
    assert "user:ROLE" in example and "not passwords" in example


def test_the_celery_profile_adds_a_broker_and_workers_that_share_the_airflow_configuration(
    compose: dict[str, Any],
) -> None:
    s = compose["services"]
    assert s["redis"]["profiles"] == ["celery"] and s["airflow-worker"]["profiles"] == ["celery"]
    assert s["airflow-worker"]["command"] == ["airflow", "celery", "worker"]
    assert s["airflow-worker"]["depends_on"]["redis"] == {"condition": "service_healthy"}
    env = s["airflow-worker"]["environment"]
    assert env == s["airflow-scheduler"]["environment"]  # one configuration: same state, connections, executor
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://airflow:")  # the driver named: SQLAlchemy 2.1 would pick psycopg 3
    assert env["AIRFLOW__CORE__EXECUTOR"] == "elastico_airflow.executors.PreloadedLocalExecutor"  # the default (a LocalExecutor); the profile's users set CeleryExecutor
    celery = yaml.safe_load(
        interpolate((REPO / "docker-compose.yaml").read_text(), {**ENV, "AIRFLOW_EXECUTOR": "CeleryExecutor"})
    )
    assert celery["services"]["airflow-triggerer"]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert "celery" in (REPO / "docker" / "Dockerfile").read_text()
