"""``elastico simulate rules``: the verdict "better than production" follows the noise over seeds, and a
small sweep end to end writes its cells as they finish, resumes from them, and summarises them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from elastico_core.sim.rules_sweep import FIGURES, Ratio, SweepCell, summarise, table_md
from tests.cli_runner import run_cli as cli


def _cell(seed: int, jct: dict[str, float], load: float = 1.5) -> SweepCell:
    figs = {name: {f: 1.0 for f in FIGURES} | {"avg_jct_s": v, "throughput": 10.0} for name, v in jct.items()}
    return SweepCell(load, seed, 100, figs)


def test_a_variant_is_better_only_when_its_whole_interval_is() -> None:
    steady = [_cell(s, {"volcano": 100.0, "production": 50.0, "fast": 45.0 + s * 0.1, "noisy": 50.0 * f})
              for s, f in enumerate((0.8, 1.2, 0.9))]
    rows = {r.variant: r for r in summarise(steady, ["production", "fast", "noisy"])}
    assert rows["fast"].better and rows["fast"].jct_vs_production.high < 1.0
    assert not rows["noisy"].better and rows["noisy"].jct_vs_production.low < 1.0 < rows["noisy"].jct_vs_production.high
    assert not rows["production"].better and rows["production"].jct_vs_production.mean == pytest.approx(1.0)
    assert rows["production"].jct_vs_reference.mean == pytest.approx(0.5)
    one = {r.variant: r for r in summarise(steady[:1], ["production", "fast"])}
    assert not one["fast"].better and math.isinf(one["fast"].jct_vs_production.high)  # one seed: no verdict
    text = table_md(list(rows.values()), "t")
    assert "| 1.5x | fast |" in text and "**yes**" in text
    assert "(" not in table_md(list(one.values()), "t").split("| 1.5x | fast |")[1].split("|")[2]  # no interval


def test_ratio_is_a_geometric_mean_with_its_range() -> None:
    r = Ratio.of([0.5, 2.0])
    assert r.mean == pytest.approx(1.0) and r.min == pytest.approx(0.5) and r.max == pytest.approx(2.0)


def test_a_small_sweep_writes_cells_resumes_and_summarises(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "rules"
    args = ["simulate", "rules", "--gpus", "8", "--hours", "1", "--loads", "1.5", "--seeds", "0",
            "--variants", "margin-0", "--out", str(out), "--json"]
    code, stdout, err = cli(capsys, *args)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["variants"] == ["production", "margin-0"] and {r["variant"] for r in doc["rows"]} == {"production", "margin-0"}
    cells = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    assert [(c["load"], c["seed"]) for c in cells] == [(1.5, 0)]
    assert set(cells[0]["figures"]) == {"volcano", "production", "margin-0"}
    assert (out / "rules.md").read_text().count("| 1.5x |") == 2 and (out / "rules.png").stat().st_size > 0
    # resumed with one more seed: the kept cell is not simulated again
    kept = (out / "cells.jsonl").read_text()
    code, stdout, err = cli(capsys, *[a if a != "0" else "0-1" for a in args], "--resume")
    assert code == 0, err
    lines = (out / "cells.jsonl").read_text().splitlines()
    assert lines[0] == kept.splitlines()[0] and [json.loads(x)["seed"] for x in lines] == [0, 1]
