#!/bin/sh
# One PostgreSQL server, three databases: Airflow's metadata, the ElastiCo planner state, MLflow's store.
# Runs once, when the data volume is first initialised (docker-entrypoint-initdb.d).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" <<SQL
CREATE USER airflow WITH PASSWORD '${AIRFLOW_DB_PASSWORD}';
CREATE DATABASE airflow OWNER airflow;
CREATE USER elastico WITH PASSWORD '${ELASTICO_DB_PASSWORD}';
CREATE DATABASE elastico OWNER elastico;
CREATE USER mlflow WITH PASSWORD '${MLFLOW_DB_PASSWORD}';
CREATE DATABASE mlflow OWNER mlflow;
SQL
