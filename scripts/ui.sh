#!/usr/bin/env bash
# The whole embedded Airflow (api-server, scheduler, dag-processor, triggerer), the ElastiCo controller on
# the project's state ([tool.elastico] state) and the MLflow UI, until Ctrl-C: a DAG triggered from the UI
# runs end to end, and the controller keeps each started job's MLflow run up to date.
# Everything it starts is stopped on exit (each component in its own process group).
set -euo pipefail
source "$(dirname "$0")/demo/env.sh"
cd "$ROOT"
LOGS="$ROOT/.elastico/ui-logs"
mkdir -p "$LOGS" "$DEMO/runs"
[ -d "$DEMO/profiles" ] || cp -r "$ROOT/profiles" "$DEMO/profiles"  # the demo's own copy (CPU measurements land here)
trap stop_all EXIT
trap "exit 130" INT TERM  # Ctrl-C at any point (even while waiting for a component): stop everything, exit
"$BIN/airflow" db migrate > "$LOGS/db-migrate.log" 2>&1
init_mlflow > "$LOGS/mlflow-init.log"  # before the MLflow server and the controller both open the store
start_bg api-server "$BIN/airflow" api-server --host 127.0.0.1 --port "$PORT"
start_bg scheduler "$BIN/airflow" scheduler --skip-serve-logs
start_bg dag-processor "$BIN/airflow" dag-processor
start_bg triggerer "$BIN/airflow" triggerer --skip-serve-logs
# MLflow's server with ElastiCo's app (its UI opens experiments on their runs: elastico_core/cli/mlflow_ui.py);
# the controller writes the job runs into the same store
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start_bg mlflow "$BIN/mlflow" server --app-name elastico --host 127.0.0.1 \
  --port "$MLFLOW_PORT" --backend-store-uri "$MLFLOW_TRACKING_URI" --default-artifact-root "file://$MLFLOW_ARTIFACTS" \
  --workers 1
wait_http "http://127.0.0.1:$MLFLOW_PORT/health" 120
start_bg controller "$BIN/elastico" controller run --interval 1 --cluster scripts/demo/cluster.yaml \
  --state "$ELASTICO_STATE_URL" --profiles "$DEMO/profiles" --predictor auto
wait_http "http://127.0.0.1:$PORT/api/v2/monitor/health" 120
cat <<MSG
Airflow UI   http://127.0.0.1:$PORT   user admin, password in .airflow/simple_auth_manager_passwords.json.generated
             scheduler, dag-processor and triggerer run: a DAG triggered here runs (logs in .elastico/ui-logs/)
             scheduling status: Browse -> "ElastiCo scheduling"  (also on its own: http://127.0.0.1:$PORT/elastico/status)
MLflow UI    http://127.0.0.1:$MLFLOW_PORT   (experiments elastico/<dag> open on their runs; Models -> elastico-iac@champion)
State        $("$BIN/python" -m elastico_core.cli state where | head -n 1)   (elastico jobs list, no flags needed)
Ctrl-C stops everything started here.
MSG
wait
