"""``elastico jobs list/show`` as a person reads them: a summary with units, queue positions, no raw JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.conftest import REPO


@pytest.fixture
def state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - id: bert-a\n    workload: bert\n    floor: 50\n"
                    "  - id: greedy\n    workload: llama-3-7b\n    floor: 5000\n")
    assert run_cli(capsys, "jobs", "submit", "--spec", str(jobs), "--state", url)[0] == 0
    code, _, err = run_cli(capsys, "controller", "run", "--once", "--cluster", str(REPO / "examples/cluster.yaml"),
                           "--state", url, "--profiles", str(REPO / "profiles"), "--predictor", "table")
    assert code == 0, err
    return url


def test_show_is_a_readable_summary_with_units(capsys: pytest.CaptureFixture[str], state: str) -> None:
    code, out, _ = run_cli(capsys, "jobs", "show", "bert-a", "--state", state)
    assert code == 0
    assert not out.lstrip().startswith("{")
    flat = " ".join(out.split())
    assert "GiB GPU memory" in flat and "samples/s" in flat and "floor 50 samples/s" in flat
    code, out, _ = run_cli(capsys, "jobs", "show", "bert-a", "--state", state, "--json")
    assert json.loads(out)["id"] == "bert-a"


def test_a_queued_job_shows_its_position_and_reason_in_full(capsys: pytest.CaptureFixture[str], state: str) -> None:
    code, out, _ = run_cli(capsys, "jobs", "show", "greedy", "--state", state)
    assert code == 0
    flat = " ".join(out.split())
    assert "#1:" in flat and "tokens/s" in flat
    assert "floor-unreachable: " not in flat
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", state)
    flat = " ".join(out.replace("│", " ").split())
    assert "..." not in flat and "#1:" in flat


def test_list_fits_80_columns_a_job_in_a_few_lines(
    capsys: pytest.CaptureFixture[str], state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastico_core.cli.common import stdout

    monkeypatch.setattr(stdout, "width", 80)
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", state)
    assert code == 0
    lines = out.rstrip("\n").splitlines()
    assert all(len(line) <= 80 for line in lines)
    head = next(i for i, line in enumerate(lines) if line.startswith("ID "))  # the title may fold (a long state path)
    jobs = [line.split()[0] for line in lines[head + 1 :] if not line.startswith(" ")]
    assert sorted(jobs) == ["bert-a", "greedy"]
    assert len(lines) - head <= 1 + 3 * len(jobs)  # header, then a line per job and its reason in one or two
    flat = " ".join(out.split())
    assert "#1:" in flat and "samples/s (floor 50" in flat  # the queued job's place; the placed one's rate and floor
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", state, "--wide")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and "#1:" in flat and "a floor of at most" in flat and "tokens/s would let it run" in flat


def test_the_controller_takes_named_rules_and_refuses_unknown_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``--rules no-preempt`` runs an epoch under that variant; an unknown name is one line, exit 2, before the state."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    base = ("controller", "run", "--once", "--cluster", str(REPO / "examples/cluster.yaml"), "--state", url,
            "--profiles", str(REPO / "profiles"), "--predictor", "none")
    code, _, err = run_cli(capsys, *base, "--rules", "no-preempt")
    assert code == 0, err
    code, _, err = run_cli(capsys, *base, "--rules", "preempt-everything")
    assert code == 2 and "unknown rules 'preempt-everything'" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
