"""A fitted slowdown model on disk: ``model.json`` (kind, feature schema, metadata) + ``arrays.npz``.

No pickle: the state is JSON and numpy arrays, so loading a registered or cached model cannot run
code, and a model built for another feature layout is refused before it can mis-predict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from elastico_core.iac.conformal import UpperBound
from elastico_core.iac.features import FEATURE_NAMES, FEATURE_SCHEMA
from elastico_core.iac.models import ModelKind, SlowdownModel, model_from_state
from elastico_core.model.errors import SpecError

FORMAT = "elastico-iac-model"
FORMAT_VERSION = 1
META_FILE = "model.json"
ARRAYS_FILE = "arrays.npz"


@dataclass(frozen=True)
class StoredModel:
    """A loaded model and what was recorded with it (dataset digest, CV figures, registry version)."""

    kind: ModelKind
    model: SlowdownModel
    info: dict[str, Any] = field(default_factory=dict)
    bound: UpperBound | None = None  # calibration scores of its upper bound (models trained before have none)


def save_model(model: SlowdownModel, folder: str | Path, info: dict[str, Any] | None = None, bound: UpperBound | None = None) -> Path:
    """Write ``model`` (and its bound's calibration scores) under ``folder`` (created); returns the folder."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta, arrays = model.state()
    if bound is not None:
        arrays = {**arrays, **bound.arrays()}
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": model.kind.value,
        "feature_schema": FEATURE_SCHEMA,
        "feature_names": list(FEATURE_NAMES),
        "state": meta,
        "info": info or {},
    }
    (out / META_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True))
    np.savez(out / ARRAYS_FILE, **arrays)  # type: ignore[arg-type]
    return out


def check_schema(names: list[str] | tuple[str, ...], *, where: str) -> None:
    """Refuse a model whose input columns are not this build's ``FEATURE_NAMES``, saying what differs."""
    if tuple(names) == FEATURE_NAMES:
        return
    extra = [n for n in names if n not in FEATURE_NAMES]
    lacking = [n for n in FEATURE_NAMES if n not in names]
    detail = f"unknown {extra[:4]}, lacking {lacking[:4]}" if extra or lacking else "same names, other order"
    raise SpecError(
        f"wrong feature schema: the model takes {len(names)} features, this ElastiCo builds {len(FEATURE_NAMES)} "
        f"({FEATURE_SCHEMA}); {detail}. Retrain it with `elastico iac train`.",
        where=where,
    )


def load_model(folder: str | Path) -> StoredModel:
    """Read a model folder written by ``save_model``; SpecError if it is not one or has another schema."""
    src = Path(folder)
    meta_path = src / META_FILE
    try:
        doc = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise SpecError(f"not an ElastiCo IAC model folder (no {META_FILE})", where=str(src)) from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"unreadable model metadata ({exc.msg})", where=str(meta_path)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecError(f"not an ElastiCo IAC model (format {doc.get('format') if isinstance(doc, dict) else None!r})", where=str(meta_path))
    if int(doc.get("format_version", 0)) > FORMAT_VERSION:
        raise SpecError(f"model format {doc['format_version']} is newer than this ElastiCo reads ({FORMAT_VERSION})", where=str(meta_path))
    check_schema(list(doc.get("feature_names", [])), where=str(meta_path))
    try:
        kind = ModelKind(doc["kind"])
    except (KeyError, ValueError):
        raise SpecError(f"unknown model kind {doc.get('kind')!r}", where=str(meta_path)) from None
    try:
        with np.load(src / ARRAYS_FILE, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        model = model_from_state(kind, doc["state"], arrays)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise SpecError(f"damaged model files ({type(exc).__name__}: {str(exc)[:120]})", where=str(src)) from None
    if model.n_features_in_ != len(FEATURE_NAMES):
        raise SpecError(f"model takes {model.n_features_in_} features, want {len(FEATURE_NAMES)}", where=str(src))
    return StoredModel(kind, model, dict(doc.get("info", {})), UpperBound.from_arrays(arrays))
