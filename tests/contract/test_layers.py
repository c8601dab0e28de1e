"""The layout shows the architecture: imports point down the layers of DESIGN.md (STYLE G1, G3)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from elastico_core.iac.predictor import NoInterference, SlowdownPredictor, TableLookup
from tests.conftest import REPO

CORE = REPO / "elastico_core"
ORDER = ["model", "rst", "iac", "esp", "pds", "specs", "bench", "sim", "state", "profiling", "workloads", "cli"]
# modules allowed to import mlflow: the adapters that are the one MLflow door of their layer
MLFLOW_DOORS = {"registry.py", "lineage.py", "tracking.py"}


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


FILES = sorted(CORE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(CORE)) for p in FILES])
def test_core_never_imports_airflow_or_kubernetes(path: Path) -> None:
    bad = [m for m in imports(path) if m.split(".")[0] in ("airflow", "kubernetes", "kubernetes_asyncio")]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: only plugins/ and dags/ may"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(CORE)) for p in FILES])
def test_mlflow_only_behind_its_adapters(path: Path) -> None:
    if path.name in MLFLOW_DOORS or "cli" in path.parts:
        return
    bad = [m for m in imports(path) if m.split(".")[0] == "mlflow"]
    assert not bad, f"{path.relative_to(REPO)} imports mlflow outside {sorted(MLFLOW_DOORS)}"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(CORE)) for p in FILES])
def test_imports_point_down_the_layers(path: Path) -> None:
    rel = path.relative_to(CORE)
    if len(rel.parts) < 2 or rel.parts[0] not in ORDER:
        return
    mine = ORDER.index(rel.parts[0])
    for mod in imports(path):
        parts = mod.split(".")
        if parts[0] != "elastico_core" or len(parts) < 2 or parts[1] not in ORDER:
            continue
        other = ORDER.index(parts[1])
        assert other <= mine, (
            f"{rel} ({rel.parts[0]}) imports {mod} ({parts[1]}), a layer above it"
        )


def test_model_layer_does_no_io() -> None:
    for path in (CORE / "model").rglob("*.py"):
        assert not {m.split(".")[0] for m in imports(path)} & {"polars", "yaml", "sqlalchemy", "os", "pathlib", "mlflow"}, path


@pytest.mark.parametrize("predictor", [NoInterference(), TableLookup()], ids=["none", "table"])
def test_builtin_predictors_satisfy_the_protocol(predictor: object) -> None:
    assert isinstance(predictor, SlowdownPredictor)
