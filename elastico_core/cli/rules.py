"""``elastico simulate rules``: the production rules against each named variant, over loads and seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from elastico_core.cli.common import default_profiles, print_json
from elastico_core.model.errors import SpecError
from elastico_core.sim import BUILTIN, PHILLY

CELLS = "cells.jsonl"


def rules_command(
    trace: Annotated[str, typer.Option("--trace", help=f"{BUILTIN} or {PHILLY}PATH (Philly's philly.csv)")] = BUILTIN,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs of the simulated cluster (A100-40GB, 8 per node)")] = 64,
    loads: Annotated[str, typer.Option("--loads", help="loads as multiples of the cluster's capacity")] = "0.5,1,1.5,2",
    seeds: Annotated[str, typer.Option("--seeds", help="seeds (0-7, or 0,3,5)")] = "0-7",
    variants: Annotated[str, typer.Option("--variants", help="rule sets compared (pds.rules.VARIANTS), 'all' for every one that can plan differently with the sweep's contention model (not the cold-start ones)")] = "all",
    hours: Annotated[float, typer.Option("--hours", help="length of each trace")] = 24.0,
    workers: Annotated[int, typer.Option("--workers", help="(load, seed) tasks simulated at once, one process each")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help=f"write {CELLS} (as tasks finish), rules.json, rules.md, rules.png")] = None,
    resume: Annotated[bool, typer.Option("--resume", help=f"keep the tasks already in --out's {CELLS}")] = False,
    data: Annotated[Path, typer.Option("--data", help="public data folder (request sizes for paper-mix)")] = Path("../shared/data"),
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Production rules against each variant: JCT and throughput ratios with their noise, attainment, costs."""
    from elastico_core.pds.rules import LEARNING_VARIANTS, VARIANTS
    from elastico_core.sim.rules_sweep import SweepCell, SweepTask, run_sweep, summarise, table_md
    from elastico_core.sim.runner import cluster_for
    from elastico_core.sim.seeds import parse_seeds

    cluster_for(gpus)
    if hours <= 0:
        raise SpecError(f"must be > 0, got {hours:g}", field="hours")
    names = [v for v in VARIANTS if v not in LEARNING_VARIANTS] if variants == "all" else [v.strip() for v in variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SpecError(f"unknown rules {', '.join(unknown)}; known: {', '.join(VARIANTS)}", field="variants")
    if "production" not in names:
        names.insert(0, "production")
    load_list = _loads(loads)
    seed_list = parse_seeds(seeds)
    if workers < 1:
        raise SpecError(f"need at least one worker, got {workers}", field="workers")
    if resume and out is None:
        raise SpecError("--resume needs --out (the folder whose cells are kept)", field="resume")
    data_dir = data if data.is_dir() else None
    # seed-major: a sweep stopped early still covers every load, with fewer seeds
    tasks = [SweepTask(trace, gpus, ld, s, tuple(names), hours, profiles or default_profiles(), data_dir)
             for s in seed_list for ld in load_list]
    kept: list[SweepCell] = _read_cells(out / CELLS, names) if resume and out is not None else []
    have = {(c.load, c.seed) for c in kept}
    todo = [t for t in tasks if (t.load, t.seed) not in have]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if not resume:
            (out / CELLS).write_text("")
    with _bar(len(todo)) as tick:

        def done(cell: SweepCell) -> None:
            if out is not None:
                with (out / CELLS).open("a") as fh:
                    fh.write(json.dumps({"load": cell.load, "seed": cell.seed, "jobs": cell.jobs, "figures": cell.figures}) + "\n")
            tick(cell)

        cells = kept + run_sweep(todo, workers, done=done)
    rows = summarise(cells, names)
    title = f"Rules sweep: {trace}, {gpus} GPUs, {hours:g} h, seeds {seeds}"
    doc = {"trace": trace, "gpus": gpus, "hours": hours, "loads": load_list, "seeds": list(seed_list),
           "variants": names, "rows": [r.as_json() for r in rows]}
    if out is not None:
        (out / "rules.json").write_text(json.dumps(doc, indent=2) + "\n")
        (out / "rules.md").write_text(table_md(rows, title) + "\n")
        from elastico_core.sim.plots import rules_plot

        rules_plot(rows, out / "rules.png", title)
    if as_json:
        print_json(doc)
    else:
        from elastico_core.cli.common import stdout

        stdout.print(table_md(rows, title), soft_wrap=True)


def _loads(raw: str) -> list[float]:
    try:
        values = [float(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"want comma-separated numbers, got {raw!r}", field="loads") from None
    if not values or any(not 0 < v <= 10 for v in values):
        raise SpecError(f"want loads in (0, 10], got {raw!r}", field="loads")
    return values


def _read_cells(path: Path, names: list[str]) -> list:  # type: ignore[type-arg]
    """The finished tasks of an earlier run (those that ran every variant asked now)."""
    from elastico_core.sim.rules_sweep import REFERENCE, SweepCell

    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            cell = SweepCell(float(d["load"]), int(d["seed"]), int(d["jobs"]), d["figures"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a killed run: that task runs again
        if all(n in cell.figures for n in [REFERENCE, *names]):
            out.append(cell)
    return out


class _bar:
    """A rich progress bar over the sweep's tasks, on stderr."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from elastico_core.cli.common import stderr

        self.progress = Progress(TextColumn("rules sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[last]}"),
                                 TimeElapsedColumn(), console=stderr)
        self.task = self.progress.add_task("sweep", total=total, last="")

    def __enter__(self):  # type: ignore[no-untyped-def]
        self.progress.start()

        def tick(cell) -> None:  # type: ignore[no-untyped-def]
            self.progress.update(self.task, advance=1, last=f"load {cell.load:g} seed {cell.seed}")

        return tick

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def register(sim_app: typer.Typer) -> None:
    sim_app.command("rules")(rules_command)
