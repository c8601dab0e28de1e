# Sourced by scripts/demo.sh and scripts/ui.sh: one embedded ElastiCo + Airflow + MLflow setup, all under
# the repository's ignored folders (.airflow, .elastico), listening on 127.0.0.1 only. MLflow uses the
# project's embedded store (.elastico/mlflow.db, artifacts in .elastico/mlartifacts), the same one the
# IAC registry and the profiler write to, so one MLflow UI shows models, profiles and Airflow's jobs.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
BIN="$VENV/bin"
DEMO="$ROOT/.elastico/demo"
PORT="${ELASTICO_DEMO_PORT:-8080}"
MLFLOW_PORT="${ELASTICO_MLFLOW_PORT:-5000}"
MODEL_DIR="$ROOT/.elastico/models/tiny-llama"
DATA="${ELASTICO_DATA:-$ROOT/../shared/data}"  # the public data folder (Gavel's measured pairs)

export AIRFLOW_HOME="$ROOT/.airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# the LocalExecutor with the operator imported before its workers fork (plugins/elastico_airflow/executors.py)
export AIRFLOW__CORE__EXECUTOR=elastico_airflow.executors.PreloadedLocalExecutor
export AIRFLOW__CORE__PARALLELISM=4
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
export AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL=5
export AIRFLOW__LOGGING__LOGGING_LEVEL=INFO
# secrets, logs and state are the owner's only: the JWT secret mints admin tokens, the logs name jobs
umask 077
mkdir -p "$AIRFLOW_HOME" "$ROOT/.elastico/mlartifacts"
chmod -R go-rwx "$AIRFLOW_HOME" "$ROOT/.elastico" 2>/dev/null || true  # files of runs made before this rule
if [ ! -s "$AIRFLOW_HOME/demo-jwt-secret" ]; then
  "$BIN/python" -c "import secrets; print(secrets.token_hex(48))" > "$AIRFLOW_HOME/demo-jwt-secret"
fi
# the admin password, written here (0600) so the api-server finds it and never prints it to its log
PASSWORD_FILE="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
if [ ! -s "$PASSWORD_FILE" ]; then
  "$BIN/python" -c "import json, secrets; print(json.dumps({'admin': secrets.token_urlsafe(18)}))" > "$PASSWORD_FILE"
fi
AIRFLOW__API_AUTH__JWT_SECRET="$(cat "$AIRFLOW_HOME/demo-jwt-secret")"
export AIRFLOW__API_AUTH__JWT_SECRET
export MLFLOW_TRACKING_URI="sqlite:///$ROOT/.elastico/mlflow.db"
export ELASTICO_MLFLOW_UI_URL="http://127.0.0.1:$MLFLOW_PORT"  # the status page links jobs to their runs here
MLFLOW_ARTIFACTS="$ROOT/.elastico/mlartifacts"
# the planner state: the project's setting ([tool.elastico] state in pyproject.toml, else $ELASTICO_STATE_URL),
# so that `elastico jobs list` without flags shows what the demo and `make ui` run
ELASTICO_STATE_URL="$(cd "$ROOT" && "$BIN/python" -m elastico_core.cli state where --url)"
export ELASTICO_STATE_URL
# the connection the operator, the trigger and the status page read (JSON connection in an env var)
AIRFLOW_CONN_ELASTICO_DEFAULT="$("$BIN/python" - "$DEMO" "$MODEL_DIR" "$MLFLOW_TRACKING_URI" "$ELASTICO_STATE_URL" <<'PY'
import json, sys
demo, model, mlflow_uri, state_url = sys.argv[1:5]
print(json.dumps({"conn_type": "elastico", "extra": {
    "state_url": state_url, "launcher": "local", "workdir": f"{demo}/runs",
    "workload_env": {"ELASTICO_SCALE": "tiny", "ELASTICO_TORCH_THREADS": "1", "ELASTICO_MODEL": model},
    "mlflow_tracking_uri": mlflow_uri, "report_cpu_throughput": True}}))
PY
)"
export AIRFLOW_CONN_ELASTICO_DEFAULT

# start "$@" in its own process group, logging to $LOGS/<name>.log; remember the group for stop_all
PGIDS=()
start_bg() {
  local name="$1"; shift
  setsid "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
  PGIDS+=("$!")
}
stop_all() {
  local pg
  for pg in "${PGIDS[@]}"; do kill -TERM -- "-$pg" 2>/dev/null || true; done
  for _ in $(seq 1 40); do
    local alive=0
    for pg in "${PGIDS[@]}"; do kill -0 -- "-$pg" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.25
  done
  for pg in "${PGIDS[@]}"; do kill -KILL -- "-$pg" 2>/dev/null || true; done
}
init_mlflow() {  # the MLflow store and the DAGs' experiments, once, before anything else opens the store
  "$BIN/python" - "$MLFLOW_ARTIFACTS" <<'PY' 2>/dev/null
import os, pathlib, sys, mlflow
mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
client = mlflow.MlflowClient()
kind = {"mlflow.experimentKind": "custom_model_development"}  # MLflow's UI opens these on their runs
for dag in ("training_runs", "batch_labeling", "mixed_cluster_day"):
    name = f"elastico/{dag}"
    exp = client.get_experiment_by_name(name)
    if exp is None:
        client.create_experiment(name, artifact_location=pathlib.Path(sys.argv[1]).as_uri(), tags=kind)
    else:
        client.set_experiment_tag(exp.experiment_id, *next(iter(kind.items())))
print("experiments:", ", ".join(e.name for e in client.search_experiments()))
PY
}
wait_http() {  # url seconds
  local i
  for i in $(seq 1 "$2"); do
    if "$BIN/python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  echo "timed out waiting for $1" >&2
  return 1
}
