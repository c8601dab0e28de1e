"""Importer for Microsoft's Philly trace (Jeon et al., ATC'19) in the form Pollux's artifact ships it.

Input: ``philly.csv`` with columns ``timestamp`` (submit time, ``YYYY-MM-DD HH:MM:SS``), ``duration``
(run seconds), ``num_gpus``, ``gpu_time`` and ``cluster`` (the virtual cluster). Get it from the
petuum/adaptdl repository, branch ``osdi21-artifact``, file ``simulator/traces/philly.csv``
(Apache-2.0; rows derive from Microsoft's Philly trace, CC-BY-4.0) — or from Microsoft's
``msr-fiddle/philly-traces`` repository, whose ``cluster_job_log`` the Pollux file summarises.

Mapping onto the trace contract:
* a window of ``hours`` starting ``start_h`` hours after the trace's first submission (default: day 37,
  2017-10-11, a busy day with ~2,900 jobs and ~14,000 GPU-hours); submit times become seconds from the
  window's start;
* ``sample``: each job is kept with this probability (seeded), to fit the trace to a smaller cluster
  (Philly's virtual clusters together ran ~375 GPUs busy on average);
* ``vc``: keep only one virtual cluster; the virtual cluster becomes the job's ``user`` (so DRF
  shares the cluster between Philly's teams) and its ``queue`` (``vc-<id>``: the teams' queues of
  ``sim/queues.py``);
* every job is training (``kind=train``); its workload is drawn by the seeded mapping of
  ``trace.map_workload``; GPU requests above 8 become 8 (the zoo's largest data-parallel degree);
* ``job_id`` is ``philly-<row>`` (the row in the file, stable across windows).
"""

from __future__ import annotations

import csv
import datetime as dt
import re
import zlib
from pathlib import Path

import numpy as np

from elastico_core.model.errors import SpecError
from elastico_core.model.workload import JobKind
from elastico_core.sim.trace import Trace, TraceJob, map_workload

COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def vc_queue(vc: str) -> str:
    """The queue of a Philly virtual cluster (its hex id as a DNS label)."""
    label = re.sub(r"[^a-z0-9-]+", "-", vc.strip().lower()).strip("-")[:60]
    return f"vc-{label}" if label else "vc-none"
DEFAULT_START_H = 37 * 24.0
MAX_GPUS = 8


def import_philly(
    path: Path, *, seed: int = 0, hours: float = 24.0, start_h: float = DEFAULT_START_H, sample: float = 1.0,
    vc: str | None = None,
) -> Trace:
    if not 0.0 < sample <= 1.0:
        raise SpecError(f"must be in (0, 1], got {sample!r}", field="sample")
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read Philly trace: {exc.strerror}", where=str(path)) from None
    with fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SpecError(f"not a Philly trace: missing columns {missing} (want {', '.join(COLUMNS)})", where=str(path))
        rows = []
        for i, row in enumerate(reader):
            try:
                ts = dt.datetime.fromisoformat(row["timestamp"]).timestamp()
                dur = float(row["duration"])
                gpus = int(float(row["num_gpus"]))
            except (TypeError, ValueError):
                raise SpecError(f"unreadable row {row!r}", where=f"{path}: line {i + 2}") from None
            rows.append((i, ts, dur, gpus, row.get("cluster") or ""))
    if not rows:
        return Trace(path.name, ())
    t0 = min(r[1] for r in rows) + start_h * 3600.0
    t1 = t0 + hours * 3600.0
    jobs = []
    for i, ts, dur, gpus, cluster in rows:
        if not t0 <= ts < t1 or dur <= 0 or gpus < 1 or (vc is not None and cluster != vc):
            continue
        if sample < 1.0:
            u = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(f"philly-{i}".encode()), 3]).random()
            if u >= sample:
                continue
        job_id = f"philly-{i:06d}"
        jobs.append(
            TraceJob(job_id, round(ts - t0, 3), dur, min(gpus, MAX_GPUS), JobKind.TRAIN,
                     map_workload(job_id, JobKind.TRAIN, seed), cluster, mapped=True, queue=vc_queue(cluster))
        )
    jobs.sort(key=lambda j: (j.submit_time_s, j.job_id))
    notes = (
        f"Philly window {start_h:g} h + {hours:g} h, sample {sample:g}{', vc ' + vc if vc else ''}: {len(jobs)} jobs, "
        f"workloads mapped with seed {seed}, GPU requests capped at {MAX_GPUS}",
    )
    return Trace(f"philly:{path.name}", tuple(jobs), notes)
