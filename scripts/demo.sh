#!/usr/bin/env bash
# The main job on the embedded default: Airflow (SQLite, LocalExecutor, loopback only) + MLflow (SQLite
# store) + the ElastiCo controller, then training_runs and batch_labeling end to end with the local
# launcher (real workload processes on CPU, tiny models). Everything it starts is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/demo/env.sh"
cd "$ROOT"
T0=$(date +%s)
step() { printf '\n== %s (+%ss)\n' "$1" "$(( $(date +%s) - T0 ))"; }

rm -rf "$DEMO"
case "$ELASTICO_STATE_URL" in  # a fresh demo starts from an empty state: the project's own file only
  "sqlite:///$ROOT/.elastico/"*)
    STATE_FILE="${ELASTICO_STATE_URL#sqlite:///}"; rm -f "$STATE_FILE" "$STATE_FILE-wal" "$STATE_FILE-shm" ;;
  *) echo "note: the demo adds its jobs to the state \$ELASTICO_STATE_URL names; that state is not reset" ;;
esac
mkdir -p "$DEMO/runs" "$DEMO/logs"
LOGS="$DEMO/logs"
cp -r "$ROOT/profiles" "$DEMO/profiles"   # the controller feeds CPU measurements into this copy only
trap stop_all EXIT
trap "exit 130" INT TERM  # Ctrl-C at any point (even while waiting for a component): stop everything, exit

step "initialising Airflow in .airflow (SQLite, LocalExecutor, parallelism 4, no examples)"
"$BIN/airflow" db migrate > "$LOGS/db-migrate.log" 2>&1

step "starting Airflow: api-server on 127.0.0.1:$PORT, scheduler, dag-processor, triggerer"
start_bg api-server "$BIN/airflow" api-server --host 127.0.0.1 --port "$PORT"
start_bg scheduler "$BIN/airflow" scheduler --skip-serve-logs
start_bg dag-processor "$BIN/airflow" dag-processor
start_bg triggerer "$BIN/airflow" triggerer --skip-serve-logs

step "initialising MLflow in .elastico/mlflow.db (SQLite store) while Airflow starts"
init_mlflow

step "training the interference model on the measured pairs (Gavel's, the imported H200 pairs) and registering it"
PAIRS=()
for f in "$DATA/gavel/physical_cluster_throughputs.json" "$ROOT"/profiles/colocation/*.parquet; do
  [ -f "$f" ] && PAIRS+=(--data "$f")
done
if [ "${#PAIRS[@]}" -gt 0 ]; then
  "$BIN/elastico" iac train "${PAIRS[@]}" --model cf --folds 5 --register > "$LOGS/iac-train.log" 2>&1 \
    && tail -n 2 "$LOGS/iac-train.log" \
    || { echo "IAC training failed (see $LOGS/iac-train.log): the controller plans with Table 6's pairs"; }
else
  echo "no measured pairs found (set ELASTICO_DATA to the data folder): the controller plans with Table 6's pairs"
fi

step "starting the controller (ΔT = 1 s) with the registered interference model"
start_bg controller "$BIN/elastico" controller run --interval 1 --cluster scripts/demo/cluster.yaml \
  --state "$ELASTICO_STATE_URL" --profiles "$DEMO/profiles" --predictor auto

step "the tiny model vLLM serves on CPU (built once into .elastico/models)"
"$BIN/python" -m elastico_core.workloads.tiny_model --out "$MODEL_DIR"
wait_http "http://127.0.0.1:$PORT/api/v2/monitor/health" 120

step "running training_runs and batch_labeling"
"$BIN/python" scripts/demo/driver.py --port "$PORT" --state "$ELASTICO_STATE_URL" --timeout 900
step "the interference model learns from the demo's co-located jobs (what the iac_retrain DAG runs)"
"$BIN/elastico" iac collect-runtime --state "$ELASTICO_STATE_URL" --profiles "$DEMO/profiles" \
  --out "$DEMO/profiles/colocation/runtime/pairs.parquet" 2>"$LOGS/iac-retrain.log" || echo "collecting runtime pairs failed (see $LOGS/iac-retrain.log)"
if [ "${#PAIRS[@]}" -gt 0 ]; then
  RT=(); [ -f "$DEMO/profiles/colocation/runtime/pairs.parquet" ] && RT=(--runtime "$DEMO/profiles/colocation/runtime/pairs.parquet")
  "$BIN/elastico" iac retrain "${PAIRS[@]}" "${RT[@]}" --model cf --folds 5 >> "$LOGS/iac-retrain.log" 2>&1 \
    && tail -n 1 "$LOGS/iac-retrain.log" || echo "retraining failed (see $LOGS/iac-retrain.log)"
fi
step "done"
cat <<MSG

Open the UIs with:  make ui
  Airflow UI      http://127.0.0.1:$PORT  (user admin, password in .airflow/simple_auth_manager_passwords.json.generated)
                  -> Browse -> "ElastiCo scheduling" (or http://127.0.0.1:$PORT/elastico/status)
  MLflow UI       http://127.0.0.1:$MLFLOW_PORT/#/experiments?workflowType=machine_learning  (experiments elastico/training_runs, elastico/batch_labeling: one run per job,
                  tagged with the elastico-iac version that planned it; Models -> elastico-iac@champion)
The state:       $("$BIN/python" -m elastico_core.cli state where | head -n 1)  (elastico jobs list, with no flags)
Logs of this run: .elastico/demo/logs/ (components), .elastico/demo/runs/<job>/ (each job's progress and logs)
MSG
