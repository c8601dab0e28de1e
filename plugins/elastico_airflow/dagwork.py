"""The work the example DAGs' Python tasks do: build job lists, shard a dataset, merge outputs, draw a day.

Imported inside tasks only (it may import polars and the simulator), never at DAG-file top level. Every
function writes under a folder partitioned by DAG and run id and overwrites deterministically, so a
re-run of the same run gives the same files, and a new run never touches another run's.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
INSTRUCTION = "Complete the line of verse.\n"


def run_folder(root: str | Path, dag_id: str, run_id: str) -> Path:
    """``<root>/<dag_id>/<run_id>`` with the run id made file-name safe."""
    return Path(root) / SAFE.sub("_", dag_id) / SAFE.sub("_", run_id)


def outputs_root(configured: str, workdir: Path) -> Path:
    """The DAG's ``output_root`` param, else ``outputs/`` beside the launcher's run folder."""
    return Path(configured).absolute() if configured else workdir.parent / "outputs"


def training_runs(models: Sequence[Mapping[str, Any]], steps: int) -> list[dict[str, Any]]:
    """Operator kwargs for each training run (``expand_kwargs``); names must be unique."""
    names = [m["name"] for m in models]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"training run names must be unique; repeated: {dup}")
    out = []
    for i, m in enumerate(models):
        out.append(
            {
                "name": m["name"],  # the pod's name and the mapped task's label in Airflow's UI
                "workload": m["workload"],
                "floor": float(m["floor"]),
                "weight": float(m.get("weight", 1.0)),
                "gpus": int(m.get("gpus", 1)),
                "priority": int(m.get("priority", 0)),
                "knobs": dict(m.get("knobs") or {}) or None,
                "entry_args": ["--steps", str(steps), "--seed", str(i)],
            }
        )
    return out


def builtin_texts(rows: int) -> list[dict[str, str]]:
    """A deterministic public-domain dataset: lines of Shakespeare's sonnets (1609), cycled to ``rows``."""
    from elastico_core.workloads.corpus import lines

    text = lines()
    return [{"id": f"row-{i:05d}", "text": text[i % len(text)]} for i in range(rows)]


def read_texts(path: Path) -> list[dict[str, str]]:
    """A JSONL dataset with a ``text`` field (and optional ``id``)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise ValueError(f"{path}: line {n} has no 'text' string")
            out.append({"id": str(obj.get("id", f"row-{n:05d}")), "text": obj["text"]})
    return out


def prompt_of(text: str) -> str:
    """The labeling prompt: an instruction shared by every row (prefix caching helps) and half a line."""
    words = text.split(" ")
    return INSTRUCTION + " ".join(words[: max(1, len(words) // 2)]) + " "


def write_shards(rows: Sequence[Mapping[str, str]], shards: int, folder: Path) -> list[Path]:
    """Split ``rows`` round-robin into ``shards`` JSONL files (``id``, ``prompt``); atomic, deterministic."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(shards):
        part = [r for i, r in enumerate(rows) if i % shards == k]
        path = folder / f"shard-{k:03d}.jsonl"
        tmp = folder / f".{path.name}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in part:
                fh.write(json.dumps({"id": r["id"], "prompt": prompt_of(r["text"])}, sort_keys=True) + "\n")
        os.replace(tmp, path)
        paths.append(path)
    return paths


def merge_outputs(parts: Sequence[Path], out: Path) -> dict[str, Any]:
    """Concatenate the shards' parquet outputs in shard order into ``out`` (atomic); returns counts."""
    import polars as pl

    missing = [str(p) for p in parts if not p.exists()]
    if missing:
        raise FileNotFoundError(f"shard outputs missing: {missing}")
    frames = [pl.read_parquet(p).with_columns(pl.lit(i).alias("shard")) for i, p in enumerate(parts)]
    merged = pl.concat(frames).sort(["shard", "id"]) if frames else pl.DataFrame()
    labels = merged.with_columns(pl.col("output").str.strip_chars().alias("label")) if frames else merged
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    labels.write_parquet(tmp)
    os.replace(tmp, out)
    return {
        "path": str(out),
        "rows": labels.height,
        "shards": len(parts),
        "errors": int((labels["error"] != "").sum()) if labels.height else 0,
    }


def day_jobs(
    *,
    seed: int,
    gpus: int,
    hours: float,
    max_jobs: int,
    time_scale: float,
    train_steps: int,
    infer_rows: int,
    folder: Path,
) -> list[dict[str, Any]]:
    """The paper's mixed day (``sim.paper_mix``) for a ``gpus``-GPU cluster, compressed for a demo.

    Arrivals keep the trace's order and spacing divided by ``time_scale``; each training job runs
    ``train_steps`` iterations, each inference job labels ``infer_rows`` prompts. The trace carries no
    throughput floors, so floors are 0: the planner maximises weighted throughput.
    """
    from elastico_core.cli.common import default_profiles
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
    from elastico_core.workloads.prompts import synthetic_prompts

    store = ProfileStore.open(default_profiles())
    trace = paper_mix(seed, PaperMixConfig(gpus=gpus, hours=hours), store=store)
    jobs = sorted(trace.jobs, key=lambda j: j.submit_time_s)[:max_jobs]
    folder.mkdir(parents=True, exist_ok=True)
    first = jobs[0].submit_time_s if jobs else 0.0
    out = []
    for i, j in enumerate(jobs):
        arrive = round((j.submit_time_s - first) / time_scale, 2)
        base = {"name": f"{j.workload}-{i}", "workload": j.workload, "floor": 0.0, "gpus": 1, "arrive_after_s": arrive}
        if j.kind.value == "train":
            out.append({**base, "entry_args": ["--steps", str(train_steps), "--seed", str(i)]})
            continue
        shard = folder / f"{j.job_id}.jsonl"
        rows = synthetic_prompts(infer_rows, seed=seed * 1000 + i)
        tmp = folder / f".{shard.name}.tmp"
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
        os.replace(tmp, shard)
        out.append(
            {
                **base,
                "entry_args": [
                    "--input",
                    str(shard),
                    "--output",
                    str(folder / f"{j.job_id}.parquet"),
                    "--max-tokens",
                    "12",
                ],
            }
        )
    return out
