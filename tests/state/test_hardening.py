"""The adversarial probe's repros, end to end through the CLI: each failed on the code before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.cli_runner import run_cli as run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("bad", [float("nan"), None, float("inf")])
def test_a_bad_profile_value_never_fails_the_queue(
    bad: float | None, tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    path = profiles_dir / "a100-40gb_40960_any_any.parquet"
    column = "throughput" if bad == float("inf") else "gpu_mem_mib"
    pl.read_parquet(path).with_columns(pl.lit(bad, dtype=pl.Float64).alias(column)).write_parquet(path)
    assert run(capsys, "jobs", "submit", "--spec", str(EXAMPLES / "jobs.yaml"), "--state", url)[0] == 0
    code, out, err = run(capsys, "controller", "run", "--once", "--cluster", str(EXAMPLES / "cluster.yaml"),
                         "--state", url, "--profiles", str(profiles_dir), "--json")
    assert code == 0, err
    assert any("rows quarantined" in r.message and path.name in r.message for r in caplog.records)
    code, out, _ = run(capsys, "jobs", "list", "--json", "--state", url)
    jobs = json.loads(out)
    assert len(jobs) == 11 and not [j for j in jobs if j["status"] == "failed"]
    assert all(j["status"] == "admitted" or j.get("reason") for j in jobs), jobs
    # the one-shot planner says the same and prints no traceback
    code, out, err = run(capsys, "plan", "--cluster", str(EXAMPLES / "cluster.yaml"), "--jobs", str(EXAMPLES / "jobs.yaml"),
                         "--profiles", str(profiles_dir))
    assert code == 0 and "Traceback" not in err + out
