"""Model folders: a round trip predicts the same; another feature schema is refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from elastico_core.iac.modelfile import META_FILE, load_model, save_model
from elastico_core.iac.models import LinearRegressor, ModelKind
from elastico_core.model.errors import SpecError


@pytest.fixture
def saved(tmp_path: Path, synthetic_small):  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    model = LinearRegressor().fit(s.X, s.y)
    return save_model(model, tmp_path / "m", {"note": "x"}), model, s.X


def test_round_trip(saved) -> None:  # type: ignore[no-untyped-def]
    folder, model, X = saved
    back = load_model(folder)
    assert back.kind is ModelKind.LINEAR and back.info == {"note": "x"}
    np.testing.assert_array_equal(back.model.predict(X), model.predict(X))


def test_wrong_feature_schema_is_refused(saved) -> None:  # type: ignore[no-untyped-def]
    folder, _, _ = saved
    doc = json.loads((folder / META_FILE).read_text())
    doc["feature_names"] = doc["feature_names"][:36]  # an older, counter-flag-less model
    (folder / META_FILE).write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="wrong feature schema: the model takes 36 features, this ElastiCo builds 46"):
        load_model(folder)


def test_reordered_schema_is_refused(saved) -> None:  # type: ignore[no-untyped-def]
    folder, _, _ = saved
    doc = json.loads((folder / META_FILE).read_text())
    doc["feature_names"] = list(reversed(doc["feature_names"]))
    (folder / META_FILE).write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="same names, other order"):
        load_model(folder)


def test_not_a_model_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not an ElastiCo IAC model folder"):
        load_model(tmp_path)
    (tmp_path / META_FILE).write_text('{"format": "sklearn"}')
    with pytest.raises(SpecError, match="not an ElastiCo IAC model"):
        load_model(tmp_path)
