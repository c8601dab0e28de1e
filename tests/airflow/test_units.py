"""Small pure pieces of the plugin: settings resolution, the hook's fallbacks, launch specs, progress summaries,
the Kubernetes watcher's switch delivery, the DAG helpers' determinism, the status page rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import Env


@pytest.mark.parametrize(
    ("conn", "env", "url", "source"),
    [
        (None, {}, "sqlite:///.elastico/state.db", "default"),
        (None, {"ELASTICO_STATE_URL": "sqlite:////x/s.db"}, "sqlite:////x/s.db", "$ELASTICO_STATE_URL"),
        (
            {"extra": {"state_url": "postgresql://u:p@db/e"}},
            {"ELASTICO_STATE_URL": "x"},
            "postgresql://u:p@db/e",
            "connection extra state_url",
        ),
        ({"host": "sqlite:////y.db"}, {}, "sqlite:////y.db", "connection host"),
        (
            {"conn_type": "postgres", "host": "db", "login": "el", "password": "s@c/ret", "port": 5433, "schema": "st"},
            {},
            "postgresql+psycopg2://el:s%40c%2Fret@db:5433/st",
            "connection (postgres)",
        ),
    ],
)
def test_state_url_precedence(conn: dict[str, Any] | None, env: dict[str, str], url: str, source: str) -> None:
    from elastico_airflow.settings import ConnectionFields, resolve_settings

    got = resolve_settings(ConnectionFields(**conn) if conn is not None else None, env)
    assert (got.state_url, got.source) == (url, source)


def test_redaction_and_bad_settings() -> None:
    from elastico_airflow.settings import ConnectionFields, SettingsError, has_password, redact_url, resolve_settings

    assert redact_url("postgresql+psycopg2://el:secret@db/e") == "postgresql+psycopg2://el:***@db/e"
    assert redact_url("sqlite:////a/b.db") == "sqlite:////a/b.db" and not has_password("sqlite:////a/b.db")
    assert has_password("postgresql://a:b@h/d")
    # a password in the query string (psycopg2 accepts it) is a password too: never logged, never in a local env
    assert has_password("postgresql+psycopg2://u@h/db?password=pw") and "pw" not in redact_url("postgresql://u@h/db?password=pw")
    assert has_password("postgresql://u@h/db?sslpassword=pw") and not has_password("postgresql://u@h/db?sslmode=require")
    for extra, message in (
        ((("launcher", "ssh"),), "launcher"),
        ((("sharing", "magic"),), "sharing"),
        ((("workload_env", {"LD_PRELOAD": "x"}),), "workload_env"),
    ):
        with pytest.raises(SettingsError, match=message):
            resolve_settings(ConnectionFields(extra=dict(extra)), {})
    with pytest.raises(SettingsError, match="JSON"):
        resolve_settings(ConnectionFields(extra="{not json"), {})


def test_hook_without_a_connection_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from elastico_airflow.hooks import ElasticoHook

    monkeypatch.delenv("AIRFLOW_CONN_ELASTICO_DEFAULT", raising=False)
    monkeypatch.setenv("ELASTICO_STATE_URL", f"sqlite:///{tmp_path / 's.db'}")
    settings = ElasticoHook("elastico_missing").get_settings()
    assert settings.state_url == f"sqlite:///{tmp_path / 's.db'}" and settings.launcher.value == "local"
    ok, message = ElasticoHook("elastico_missing").test_connection()
    assert not ok and "no ElastiCo state" in message  # the Test button reads: it creates nothing
    assert not (tmp_path / "s.db").exists()
    from elastico_core.state import upgrade_state

    upgrade_state(f"sqlite:///{tmp_path / 's.db'}")
    ok, message = ElasticoHook("elastico_missing").test_connection()
    assert ok and "0 jobs" in message


def test_hook_reads_the_connection(elastico_env: Env) -> None:
    import asyncio

    from elastico_airflow.hooks import ElasticoHook

    hook = ElasticoHook()
    assert hook.get_settings().state_url == elastico_env.state_url
    assert asyncio.run(hook.aget_settings()).state_url == elastico_env.state_url


def test_local_process_env_is_the_launch_env_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from elastico_airflow.launchspec import launch_spec, local_paths
    from elastico_airflow.local import base_env

    monkeypatch.setenv("AIRFLOW_CONN_SECRETIVE", "postgresql://u:pw@h/d")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "x" * 64)
    env = base_env(__import__("os").environ)
    assert not any(k.startswith("AIRFLOW") for k in env) and "PATH" in env
    spec = launch_spec(
        "j1",
        "train",
        "j1:1",
        {"ELASTICO_KNOBS": "{}", "ELASTICO_JOB_ID": "j1"},
        [],
        local_paths(Path("/runs"), "j1"),
        entry_args=["--steps", "3"],
        workload_env={"ELASTICO_SCALE": "tiny"},
        user_env={"ELASTICO_KNOBS": "evil"},
    )
    assert spec.env_dict()["ELASTICO_KNOBS"] == "{}"  # a user env never overwrites the contract
    assert spec.env_dict()["ELASTICO_PROGRESS_FILE"] == "/runs/j1/progress.jsonl"
    assert spec.argv("py") == ["py", "-m", "elastico_core.workloads.train", "--steps", "3"]


def test_summaries_and_outcomes() -> None:
    from elastico_airflow.supervise import Action, Outcome, outcome, summarize, watch_action

    events = (
        [{"event": "start", "device": "cpu"}]
        + [
            {"event": "step", "step": i, "samples": 10.0 * i, "rate": r, "mem_mib": 5.0 + i}
            for i, r in enumerate([1.0, 1.0, 100.0, 100.0, 100.0, 900.0], start=1)
        ]
        + [{"event": "done", "step": 6, "samples": 60.0}]
    )
    s = summarize(events)
    assert s.throughput == pytest.approx(100.0, rel=0.5) and s.steps == 6 and s.peak_mem_mib == 11.0
    assert outcome(s, 0) is Outcome.DONE and outcome(s, 1) is Outcome.FAILED
    oom = summarize([{"event": "start"}, {"event": "error", "message": "torch.OutOfMemoryError: CUDA out of memory"}])
    assert outcome(oom, 1) is Outcome.OOM
    assert watch_action("switching", "j:1", "j:2") is Action.SWITCH
    assert watch_action("switching", "j:2", "j:2") is Action.CONTINUE
    assert watch_action("cancelled", "j:1", None) is Action.STOP
    assert watch_action("pending", "j:1", None) is Action.REQUEUE


def test_dag_helpers_are_deterministic(tmp_path: Path) -> None:
    import polars as pl

    from elastico_airflow.dagwork import builtin_texts, merge_outputs, run_folder, training_runs, write_shards

    rows = builtin_texts(11)
    a = write_shards(rows, 3, tmp_path / "a")
    b = write_shards(rows, 3, tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert sum(len(p.read_text().splitlines()) for p in a) == 11
    assert run_folder("/r", "dag", "manual__2026-01-01T00:00:00+00:00") == Path(
        "/r/dag/manual__2026-01-01T00_00_00_00_00"
    )
    parts = []
    for k in range(2):
        part = tmp_path / f"p{k}.parquet"
        pl.DataFrame({"id": [f"r{k}a", f"r{k}b"], "output": [" x ", "y"], "error": ["", ""]}).write_parquet(part)
        parts.append(part)
    first = merge_outputs(parts, tmp_path / "labels.parquet")
    again = merge_outputs(parts, tmp_path / "labels.parquet")
    assert first == again and first["rows"] == 4
    assert pl.read_parquet(tmp_path / "labels.parquet")["label"].to_list() == ["x", "y", "x", "y"]
    with pytest.raises(ValueError, match="unique"):
        training_runs([{"name": "a", "workload": "bert", "floor": 1}] * 2, 5)


def test_render_escapes_everything() -> None:
    from elastico_airflow.status.render import render_page

    evil = "<script>alert(1)</script>"
    data = {
        "generated_at": "now",
        "state": {"backend": "sqlite"},
        "counts": {"pending": 1},
        "gpus": [
            {
                "id": evil,
                "model": "m",
                "capacity_mib": 100,
                "used_mem_mib": 10,
                "max_jobs": 2,
                "present": True,
                "jobs": [
                    {
                        "id": evil,
                        "status": "running",
                        "workload": "w",
                        "knobs_short": evil,
                        "memory_mib": 10,
                        "predicted_slowdown": 1.0,
                    }
                ],
            }
        ],
        "queue": [{"id": evil, "workload": "w", "floor": 1, "waiting_s": 1, "queue_code": "c", "reason": evil,
                   "floor_text": evil, "admit_hint": evil, "behind": evil}],
        "running": [{"id": evil, "status": "running", "dag_id": evil, "user": evil, "queue": evil, "workload": evil,
                     "knobs_short": evil, "gpus": [evil], "progress": {"text": evil, "fraction": 0.5, "age": evil},
                     "measured_text": evil, "predicted_text": evil, "floor_text": evil, "links": {"log": evil}}],
        "choices": {"user": [evil], "dag": [evil], "queue": [evil]},
        "filter": {"user": evil, "dag": "", "queue": "", "job": evil},
        "prices": {"epochs": [1, 2], "series": {"mem": [0.1, 0.2]}},
        "decisions": [{"epoch": 1, "kind": "hold", "job_id": evil, "reason": evil}],
        "slowdowns": [],
        "finished": [],
    }
    html = render_page(data, user=evil, csrf=evil)
    assert evil not in html and "&lt;script&gt;" in html and html.count("<script>") == 1  # the page's own only
    json.dumps(data)  # the same data is the JSON endpoint's
