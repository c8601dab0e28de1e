#!/usr/bin/env bash
# The Airflow UI (with the ElastiCo scheduling page) and the MLflow UI on the demo's stores, until Ctrl-C.
set -euo pipefail
source "$(dirname "$0")/demo/env.sh"
cd "$ROOT"
LOGS="$ROOT/.elastico/ui-logs"
mkdir -p "$LOGS"
trap stop_all EXIT INT TERM
"$BIN/airflow" db migrate > "$LOGS/db-migrate.log" 2>&1
start_bg api-server "$BIN/airflow" api-server --host 127.0.0.1 --port "$PORT"
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start_bg mlflow "$BIN/mlflow" server --host 127.0.0.1 --port "$MLFLOW_PORT" \
  --backend-store-uri "$MLFLOW_TRACKING_URI" --default-artifact-root "file://$MLFLOW_ARTIFACTS" --workers 1
wait_http "http://127.0.0.1:$PORT/api/v2/monitor/health" 120
wait_http "http://127.0.0.1:$MLFLOW_PORT/health" 120
cat <<MSG
Airflow UI   http://127.0.0.1:$PORT   user admin, password in .airflow/simple_auth_manager_passwords.json.generated
             scheduling status: Browse -> "ElastiCo scheduling"  (http://127.0.0.1:$PORT/elastico/status)
MLflow UI    http://127.0.0.1:$MLFLOW_PORT
Ctrl-C stops both.
MSG
wait
