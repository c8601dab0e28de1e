"""``elastico iac evaluate|train|convert-gavel|synthesize`` and ``elastico bench iac``.

``--data`` accepts a co-location dataset in the contract's form (``.csv``/``.parquet``), a Gavel
throughput table (``.json``, converted on the fly), or ``synthetic[:N]`` (N generated T+I/I+I rows,
seeded by ``--seed``; labelled synthetic in every output). Give ``--data`` several times to combine.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from elastico_core.cli.common import print_json, stdout
from elastico_core.model.errors import SpecError

if TYPE_CHECKING:
    from elastico_core.iac.dataset import CoLocationDataset
    from elastico_core.iac.models import ModelKind

DataOpt = Annotated[
    list[str], typer.Option("--data", help="dataset: contract .csv/.parquet, Gavel .json, or synthetic[:N] (repeatable)")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed of folds, models and synthetic rows")]
FoldsOpt = Annotated[int, typer.Option("--folds", help="grouped cross-validation folds")]


def load_data(specs: list[str], seed: int) -> CoLocationDataset:
    """Resolve every ``--data`` value and concatenate; notes about exclusions go to stderr."""
    from elastico_core.iac.dataset import concat, read_dataset
    from elastico_core.iac.gavel import convert_gavel
    from elastico_core.iac.synthetic import generate

    if not specs:
        raise SpecError("give at least one --data", field="data")
    parts = []
    for spec in specs:
        if spec == "synthetic" or spec.startswith("synthetic:"):
            count = spec.partition(":")[2] or "600"
            if not count.isdigit() or int(count) < 1:
                raise SpecError(f"synthetic:N needs a positive row count, got {count!r}", field="data")
            parts.append(generate(int(count), seed=seed))
        elif spec.lower().endswith(".json"):
            conv = convert_gavel(spec)
            if conv.skipped:
                _note(f"{spec}: skipped {len(conv.skipped)} job type(s) that do not fit alone: {', '.join(conv.skipped)}")
            parts.append(conv.dataset)
        else:
            parts.append(read_dataset(spec))
    ds = concat(parts)
    if ds.excluded_infeasible:
        _note(f"{ds.excluded_infeasible} of {ds.rows} pairs did not fit (colo_tput 0 on both sides): excluded from slowdown training")
    if ds.suspect_rows:
        _note(f"{ds.suspect_rows} of {ds.rows} rows are suspect (median slowdown below 0.97: a measurement error, not a label): skipped")
    if ds.synthetic_rows:
        _note(f"{ds.synthetic_rows} of {ds.rows} rows are SYNTHETIC (contention model): figures on them are not measured accuracy")
    return ds


def _note(text: str) -> None:
    sys.stderr.write(f"note: {text}\n")


def parse_models(text: str) -> list[ModelKind]:
    from elastico_core.iac.models import ModelKind

    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            out.append(ModelKind(part))
        except ValueError:
            raise SpecError(f"unknown model {part!r} (choose from {[k.value for k in ModelKind]})", field="models") from None
    if not out:
        raise SpecError("name at least one model", field="models")
    return list(dict.fromkeys(out))


def _torch_threads() -> None:
    """Two threads at most: the MLP is small, and the machine is shared."""
    import torch

    torch.set_num_threads(min(2, torch.get_num_threads()))


def evaluate_command(
    data: Annotated[list[str] | None, typer.Option("--data", help="dataset to cross-validate: contract .csv/.parquet, "
                                                   "Gavel .json, or synthetic[:N] (repeatable)")] = None,
    train: Annotated[list[str] | None, typer.Option("--train", help="transfer: fit on this data (repeatable) ...")] = None,
    test: Annotated[list[str] | None, typer.Option("--test", help="... and score on this data (repeatable)")] = None,
    folds: FoldsOpt = 5,
    leave_one_pair_out: Annotated[bool, typer.Option("--leave-one-pair-out", help="one fold per workload pair "
                                                     "(small measured sets)")] = False,
    models: Annotated[str, typer.Option("--models", help="comma-separated: cf, mlp, lightgbm, linear")] = "cf,mlp,lightgbm,linear",
    seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Grouped k-fold CV (a workload pair is never in both train and test), or --train A --test B: MAPE, R², bound coverage."""
    from elastico_core.iac.evaluate import evaluate, transfer
    from elastico_core.iac.evaluate import leave_one_pair_out as lopo

    kinds = parse_models(models)
    if (train or test) and data:
        raise SpecError("give either --data (cross-validation) or --train and --test (transfer), not both", field="data")
    if bool(train) != bool(test):
        raise SpecError("a transfer needs both --train and --test", field="train" if not train else "test")
    _torch_threads()
    if train and test:
        tr, te = load_data(train, seed), load_data(test, seed)
        moved = transfer(tr.samples(), te.samples(), kinds, folds=folds, seed=seed)
        if as_json:
            print_json(moved.as_dict())
            return
        _table(f"IAC transfer: trained on {tr.origin}, tested on {te.origin} ({moved.unseen_rows} of "
               f"{moved.test_samples} test samples pair a workload the training data never saw)", moved.models, moved.best)
        return
    ds = load_data(data or [], seed)
    samples = ds.samples()
    k = lopo(samples.group) if leave_one_pair_out else folds
    result = evaluate(samples, kinds, folds=k, seed=seed)
    if as_json:
        print_json({**result.as_dict(), "folds": k})
        return
    _table(f"IAC accuracy, {k}-fold grouped CV on {ds.origin}", result.models, result.best)


def _table(title: str, rows: object, best: object) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("model", "MAPE %", "R²", "samples", "T+T MAPE", "T+I MAPE", "I+I MAPE", "moderate MAPE", "bound 90 % covers"):
        t.add_column(col)
    for kind, rep in rows:  # type: ignore[attr-defined]
        by = dict(rep.by_type)
        cov = dict(rep.coverage).get(0.9)
        t.add_row(
            kind.value + (" *" if kind is best else ""),
            _fmt(rep.overall.mape),
            _fmt(rep.overall.r2),
            str(rep.overall.samples),
            *(_fmt(by[k].mape) for k in ("T+T", "T+I", "I+I")),
            _fmt(rep.moderate_mape),
            "-" if cov is None else f"{100 * cov:.1f} %",
        )
    stdout.print(t)
    stdout.print(f"best: {best.value} (lowest overall MAPE)")  # type: ignore[attr-defined]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def train_command(
    data: DataOpt,
    model: Annotated[str, typer.Option("--model", help="cf | mlp | lightgbm | linear")] = "cf",
    folds: FoldsOpt = 5,
    seed: SeedOpt = 0,
    register: Annotated[bool, typer.Option("--register", help="register a version of elastico-iac and judge the champion")] = False,
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else sqlite:///.elastico/mlflow.db")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Train on all rows, log to MLflow (params, CV metrics, dataset input, pyfunc with feature schema)."""
    from elastico_core.iac import registry

    kind = parse_models(model)[0]
    ds = load_data(data, seed)
    _torch_threads()
    result = registry.train(ds, kind, folds=folds, seed=seed, register=register, uri=tracking_uri)
    if as_json:
        print_json(result.as_dict())
        return
    stdout.print(f"run {result.run_id}: {kind.value}, cv MAPE {_fmt(result.cv.overall.mape)} %, R² {_fmt(result.cv.overall.r2)}")
    if result.version is not None:
        stdout.print(f"registered {registry.MODEL_NAME} v{result.version}; champion v{result.champion} — {result.reason}")


def convert_gavel_command(
    source: Annotated[Path, typer.Option("--in", help="Gavel physical_cluster_throughputs.json or simulation_throughputs.json")],
    out: Annotated[Path, typer.Option("--out", help="contract file to write (.csv or .parquet)")],
) -> None:
    """Write Gavel's measured pair throughputs as a co-location dataset."""
    from elastico_core.iac.dataset import write_dataset
    from elastico_core.iac.gavel import convert_gavel

    conv = convert_gavel(source)
    write_dataset(conv.dataset, out)
    stdout.print(f"{out}: {conv.dataset.rows} pairs ({conv.dataset.excluded_infeasible} did not fit), skipped {list(conv.skipped)}")


def synthesize_command(
    out: Annotated[Path, typer.Option("--out", help="contract file to write (.csv or .parquet)")],
    pairs: Annotated[int, typer.Option("--pairs", help="rows to generate")] = 600,
    seed: SeedOpt = 0,
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model the pairs share")] = "a100-80gb",
) -> None:
    """Generate SYNTHETIC T+I and I+I co-location rows from the documented contention model."""
    from elastico_core.iac.dataset import write_dataset
    from elastico_core.iac.synthetic import generate
    from elastico_core.model.hardware import gpu_model

    if pairs < 1:
        raise SpecError(f"must be >= 1, got {pairs}", field="pairs")
    ds = generate(pairs, seed=seed, gpu=gpu_model(gpu).name)
    write_dataset(ds, out)
    stdout.print(f"{out}: {ds.rows} SYNTHETIC pairs ({ds.excluded_infeasible} did not fit)")


def bench_command(
    pairs: Annotated[int, typer.Option("--pairs", help="rows per batched call (200 = a 200-job epoch, all co-located)")] = 10000,
    model: Annotated[str, typer.Option("--model", help="cf | mlp | lightgbm | linear (fitted briefly on synthetic rows)")] = "mlp",
    champion: Annotated[bool, typer.Option("--champion", help="time the registered champion instead")] = False,
    rules: Annotated[str, typer.Option("--rules", help="time the predictor as these rules' planner asks it (its bound, cold-start exploration)")] = "production",
    seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Batched prediction throughput and per-call latency of the IAC predictor (features included), as the
    planner asks it under ``--rules``."""
    from elastico_core.iac.bench import bench_model, bench_predictor, candidate_batch
    from elastico_core.iac.predictor import SlowdownPredictor
    from elastico_core.pds.rules import variant

    if pairs < 1:
        raise SpecError(f"must be >= 1, got {pairs}", field="pairs")
    view_of = variant(rules).iac_view
    _torch_threads()
    predictor: SlowdownPredictor
    if champion:
        from elastico_core.iac.champion import load_champion

        loaded = load_champion()
        _note(loaded.message)
        predictor = loaded.predictor
    else:
        from elastico_core.iac.learned import LearnedPredictor

        kind = parse_models(model)[0]
        predictor = LearnedPredictor(bench_model(kind.value, seed=seed), name=kind.value)
    predictor = view_of(predictor)
    result = bench_predictor(predictor, candidate_batch(pairs, seed=seed))
    if as_json:
        print_json(result.as_dict())
        return
    stdout.print(
        f"{predictor.name}: {result.pairs_per_s:,.0f} pairs/s at {pairs} pairs per call; "
        f"latency p50 {result.p50_ms:.3f} ms, p99 {result.p99_ms:.3f} ms ({result.calls} calls)"
    )


def collect_runtime_command(
    out: Annotated[Path, typer.Option("--out", help="contract file to write (.parquet or .csv)")],
    state: Annotated[str | None, typer.Option("--state", help="state URL (default: $ELASTICO_STATE_URL, else sqlite:///.elastico/state.db)")] = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store (measured solo rows; default: the shipped one)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Co-location rows (source=runtime) from the throughputs the cluster measured: each side against itself alone."""
    from elastico_core.cli.common import default_profiles
    from elastico_core.iac.dataset import write_dataset
    from elastico_core.rst.store import ProfileStore
    from elastico_core.state import StateStore
    from elastico_core.state.runtime_pairs import collect_runtime_pairs

    store = StateStore.open(state)
    try:
        result = collect_runtime_pairs(store, ProfileStore.open(profiles or default_profiles()))
    finally:
        store.close()
    if result.dataset is not None:
        write_dataset(result.dataset, out)
    elif out.exists():
        out.unlink()  # no pair any more: an old file must not pass for this state's
    doc = {"out": str(out) if result.dataset is not None else None, "pairs": result.pairs, "suspect": result.suspect,
           "skipped": dict(result.skipped)}
    if as_json:
        print_json(doc)
        return
    skipped = ", ".join(f"{n} {why}" for why, n in result.skipped.items()) or "none"
    stdout.print(f"{result.pairs} runtime pairs ({result.suspect} suspect) -> {doc['out']}; windows skipped: {skipped}")


def retrain_command(
    data: DataOpt,
    runtime: Annotated[Path | None, typer.Option("--runtime", help="runtime pairs (elastico iac collect-runtime)")] = None,
    model: Annotated[str, typer.Option("--model", help="cf | mlp | lightgbm | linear")] = "cf",
    holdout: Annotated[float, typer.Option("--holdout", min=0.01, max=0.9, help="share of the newest runtime rows held out")] = 0.2,
    min_holdout: Annotated[int, typer.Option("--min-holdout", min=1, help="fewest runtime rows to judge on")] = 2,
    folds: FoldsOpt = 5,
    seed: SeedOpt = 0,
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else sqlite:///.elastico/mlflow.db")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Challenger vs champion on the newest runtime rows (never trained on); `champion` moves only if it wins."""
    from elastico_core.iac import registry
    from elastico_core.iac.dataset import read_dataset

    kind = parse_models(model)[0]
    ds = load_data(data, seed)
    rt = read_dataset(runtime) if runtime is not None and runtime.exists() else None
    if runtime is not None and rt is None:
        _note(f"{runtime}: no runtime pairs yet")
    _torch_threads()
    result = registry.retrain(ds, rt, kind, holdout_fraction=holdout, min_holdout=min_holdout, folds=folds, seed=seed,
                              uri=tracking_uri)
    if as_json:
        print_json(result.as_dict())
        return
    stdout.print(f"challenger {registry.MODEL_NAME} v{result.version} ({kind.value}); champion v{result.champion} — {result.reason}")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands to the main app and the `bench` group."""
    iac = typer.Typer(help="Interference-aware co-location: the slowdown predictor (§3.3).", no_args_is_help=True)
    iac.command("evaluate")(evaluate_command)
    iac.command("train")(train_command)
    iac.command("convert-gavel")(convert_gavel_command)
    iac.command("synthesize")(synthesize_command)
    iac.command("collect-runtime")(collect_runtime_command)
    iac.command("retrain")(retrain_command)
    app.add_typer(iac, name="iac")
    bench.command("iac")(bench_command)


