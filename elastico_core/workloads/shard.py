"""Input shards (JSONL or parquet) and the incremental, resumable parquet output of a batch job.

Input rows: ``prompt`` (string, required), optional ``id`` (default: the row number) and ``max_tokens``.
Output: completed rows go to ``<output>.parts/part-NNNNN.parquet`` as they finish (each part written
atomically), so a killed job loses at most the rows since its last flush; a relaunch skips every id
already in a part. When every row is done the parts are merged into ``<output>`` in input order.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from elastico_core.model.errors import SpecError

OUTPUT_SCHEMA: dict[str, type[pl.DataType]] = {
    "id": pl.String,
    "prompt": pl.String,
    "output": pl.String,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "finish_reason": pl.String,
    "error": pl.String,
}


@dataclass(frozen=True, slots=True)
class ShardRow:
    id: str
    prompt: str
    max_tokens: int | None = None


def _row(obj: object, index: int, where: str) -> ShardRow:
    if not isinstance(obj, dict):
        raise SpecError(f"expected a JSON object, got {type(obj).__name__}", where=where)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str):
        raise SpecError(f"'prompt' must be a string, got {type(prompt).__name__}", where=where)
    raw_id = obj.get("id", index)
    if raw_id is None or isinstance(raw_id, (dict, list, bool)):
        raise SpecError(f"'id' must be a string or number, got {raw_id!r}", where=where)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise SpecError(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}", where=where)
    return ShardRow(str(raw_id), prompt, max_tokens)


def read_shard(path: Path) -> list[ShardRow]:
    """All rows of a shard; any defect is a SpecError naming the file (and line or row)."""
    if not path.exists():
        raise SpecError("no such file", where=f"shard {str(path)!r}")
    suffix = path.suffix.lower()
    rows: list[ShardRow] = []
    if suffix in (".jsonl", ".json", ".ndjson"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"unreadable ({type(exc).__name__})", where=f"shard {str(path)!r}") from None
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"shard {str(path)!r}: line {n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecError(f"not valid JSON ({exc.msg})", where=where) from None
            rows.append(_row(obj, len(rows), where))
    elif suffix == ".parquet":
        try:
            df = pl.read_parquet(path)
        except Exception as exc:  # polars raises several types for truncated / foreign files
            raise SpecError(
                f"not a readable parquet file ({type(exc).__name__})", where=f"shard {str(path)!r}"
            ) from None
        if "prompt" not in df.columns:
            raise SpecError(f"no 'prompt' column (columns: {df.columns})", where=f"shard {str(path)!r}")
        for i, obj in enumerate(df.iter_rows(named=True)):
            rows.append(
                _row(
                    {k: v for k, v in obj.items() if v is not None or k == "prompt"}, i, f"shard {str(path)!r}: row {i}"
                )
            )
    else:
        raise SpecError("unknown shard format (want .jsonl or .parquet)", where=f"shard {str(path)!r}")
    seen: set[str] = set()
    for r in rows:
        if r.id in seen:
            raise SpecError(f"duplicate id {r.id!r}", where=f"shard {str(path)!r}")
        seen.add(r.id)
    return rows


def parts_dir(output: Path) -> Path:
    return output.with_name(output.name + ".parts")


@dataclass
class ResultSink:
    """Buffers finished rows and flushes them as parquet parts; knows which ids are already done."""

    output: Path
    flush_rows: int = 32
    done: set[str] = field(default_factory=set)
    _buffer: list[dict[str, object]] = field(default_factory=list)
    _next_part: int = 0

    @classmethod
    def open(cls, output: Path, flush_rows: int = 32) -> ResultSink:
        sink = cls(output, flush_rows)
        folder = parts_dir(output)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(f"not writable ({type(exc).__name__})", where=f"output {str(output)!r}") from None
        for part in sorted(folder.glob("part-*.parquet")):
            try:
                ids = pl.read_parquet(part, columns=["id"])["id"].to_list()
            except Exception:  # a part is written atomically, so this is foreign damage: redo its rows
                part.unlink()
                continue
            sink.done.update(str(i) for i in ids)
            sink._next_part = max(sink._next_part, int(part.stem.split("-")[1]) + 1)
        if output.exists() and not sink.done:
            with contextlib.suppress(Exception):
                sink.done.update(str(i) for i in pl.read_parquet(output, columns=["id"])["id"].to_list())
        return sink

    def add(self, result: object) -> None:
        row = asdict(result)  # type: ignore[call-overload]
        self._buffer.append({k: row[k] for k in OUTPUT_SCHEMA})
        self.done.add(str(row["id"]))
        if len(self._buffer) >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        folder = parts_dir(self.output)
        path = folder / f"part-{self._next_part:05d}.parquet"
        tmp = folder / f".{path.name}.tmp"
        pl.DataFrame(self._buffer, schema=OUTPUT_SCHEMA).write_parquet(tmp)
        os.replace(tmp, path)
        self._next_part += 1
        self._buffer = []

    def finish(self, order: Sequence[str]) -> bool:
        """Merge the parts into the output when every id of ``order`` is done; True when it did."""
        self.flush()
        if not set(order) <= self.done:
            return False
        folder = parts_dir(self.output)
        parts = sorted(folder.glob("part-*.parquet"))
        frames = [pl.read_parquet(p) for p in parts]
        if self.output.exists():
            frames.append(pl.read_parquet(self.output))
        merged = pl.concat(frames) if frames else pl.DataFrame(schema=OUTPUT_SCHEMA)
        rank = pl.DataFrame(
            {"id": list(order), "_order": list(range(len(order)))}, schema={"id": pl.String, "_order": pl.Int64}
        )
        merged = merged.unique("id", keep="first").join(rank, on="id").sort("_order").drop("_order")
        tmp = self.output.with_name(f".{self.output.name}.tmp")
        merged.write_parquet(tmp)
        os.replace(tmp, self.output)
        shutil.rmtree(folder, ignore_errors=True)
        return True


def pending(rows: Iterable[ShardRow], done: set[str]) -> list[ShardRow]:
    return [r for r in rows if r.id not in done]
