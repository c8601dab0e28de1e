"""Every command, driven with a user's typical mistakes: one line on stderr, exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup as Group
from typer.core import TyperOption

from elastico_core.cli import app
from tests.cli_runner import run_cli
from tests.conftest import REPO


def _commands() -> list[tuple[tuple[str, ...], object]]:
    """(path, command) of every leaf command of ``elastico`` (a group with a callback counts as one)."""
    root = typer.main.get_command(app)
    out: list[tuple[tuple[str, ...], object]] = []

    def walk(cmd: object, path: tuple[str, ...]) -> None:
        if isinstance(cmd, Group):
            if cmd.invoke_without_command:
                out.append((path, cmd))
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))
        else:
            out.append((path, cmd))

    walk(root, ())
    return out


COMMANDS = _commands()
IDS = [" ".join(p) for p, _ in COMMANDS]


def _one_error_line(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


def test_every_command_is_covered() -> None:
    assert len(COMMANDS) >= 25
    assert {"plan", "simulate", "jobs submit", "jobs show", "profiles show", "iac train"} <= set(IDS)


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_unknown_option(capsys: pytest.CaptureFixture[str], path: tuple[str, ...], cmd: object) -> None:
    line = _one_error_line(*run_cli(capsys, *path, "--no-such-option")[::2])
    assert "--no-such-option" in line and " ".join(path) in line


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_bad_number_and_flag_value(capsys: pytest.CaptureFixture[str], path: tuple[str, ...], cmd: object) -> None:
    """A number option given a word names that option."""
    params = getattr(cmd, "params", [])
    numeric = [p for p in params if isinstance(p, TyperOption) and not p.is_flag
               and p.type_descriptor.annotation in (int, float)]
    for p in numeric:
        opt = next(o for o in p.opts if o.startswith("--"))
        line = _one_error_line(*run_cli(capsys, *path, opt, "abc")[::2])
        assert opt in line


REQUIRING = [(p, c) for p, c in COMMANDS if any(x.required for x in getattr(c, "params", []))]


@pytest.mark.parametrize(("path", "cmd"), REQUIRING, ids=[" ".join(p) for p, _ in REQUIRING])
def test_missing_required(capsys: pytest.CaptureFixture[str], path: tuple[str, ...], cmd: object) -> None:
    line = _one_error_line(*run_cli(capsys, *path)[::2])
    assert "Missing" in line


def test_a_flag_takes_no_value(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("plan", "--cluster", str(REPO / "examples/cluster.yaml"), "--jobs", str(REPO / "examples/jobs.yaml"))
    line = _one_error_line(*run_cli(capsys, *args, "--json", "true")[::2])
    assert "true" in line


def test_help_shows_flags_as_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", "--help")
    assert code == 0
    assert "<bool>" not in out and "--json" in out


@pytest.mark.parametrize(
    "args",
    [
        ("simulate", "--load", "-2", "--no-mlflow"),
        ("simulate", "--hours", "-1", "--no-mlflow"),
        ("simulate", "--hours", "nan", "--no-mlflow"),
        ("simulate", "--floor-frac", "1.5", "--no-mlflow"),
        ("simulate", "sweep", "--hours", "0", "--no-mlflow"),
        ("simulate", "learn", "--retrain-every-h", "0", "--no-mlflow"),
        ("simulate", "learn", "--min-window-s", "-5", "--no-mlflow"),
        ("simulate", "learn", "--measure-sigma", "nan", "--no-mlflow"),
    ],
    ids=lambda a: " ".join(a),
)
def test_out_of_range_values(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    line = _one_error_line(*run_cli(capsys, *args)[::2])
    assert "--" in line


def _undecodable(tmp_path: Path, name: str, text: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text)
    return p


def test_undecodable_files_name_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    jobs = _undecodable(tmp_path, "jobs.yaml", b"jobs:\n  - id: caf\xe9\n")
    cluster = _undecodable(tmp_path, "cluster.yaml", b"name: x\n\xff\n")
    trace = _undecodable(tmp_path, "trace.csv", b"job_id,submit_time_s,duration_s,num_gpus,kind\n1,0,\xfe,1,train\n")
    state = f"sqlite:///{tmp_path / 'state.db'}"
    cases = [
        (("jobs", "submit", "--spec", str(jobs), "--state", state), jobs, 2),
        (("plan", "--cluster", str(REPO / "examples/cluster.yaml"), "--jobs", str(jobs)), jobs, 2),
        (("plan", "--cluster", str(cluster), "--jobs", str(REPO / "examples/jobs.yaml")), cluster, 2),
        (("simulate", "--trace", str(trace), "--no-mlflow"), trace, 2),
    ]
    for args, path, line_no in cases:
        line = _one_error_line(*run_cli(capsys, *args)[::2])
        assert str(path) in line and f"line {line_no}" in line and "UTF-8" in line


def test_installed_entry_point_prints_one_line() -> None:
    """The console script, not only main(): what a user's shell sees."""
    r = subprocess.run([sys.executable, "-m", "elastico_core.cli", "plan", "--foo"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["error: No such option: --foo (see 'elastico plan --help')"]
