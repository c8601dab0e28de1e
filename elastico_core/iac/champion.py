"""The planner's way to get a predictor: the registered champion, its local cache, or a fallback.

``load_champion`` never raises. Order: the version behind ``models:/elastico-iac@champion`` (fetched
once, then served from the cache folder); if the tracking store is unreachable or fails, the last
cached champion, saying so; with no model anywhere (or only one of the wrong feature schema), the
``fallback`` predictor with a warning. Cache layout: ``<cache>/<model name>/v<N>/`` holds the
downloaded MLflow model, ``<cache>/<model name>/current.json`` names the version last loaded.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from elastico_core.iac.predictor import NoInterference, SlowdownPredictor

if TYPE_CHECKING:  # imported lazily: without the ML extras installed, planning falls back instead of failing
    from elastico_core.iac.learned import LearnedPredictor
    from elastico_core.iac.modelfile import StoredModel

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path(".elastico/iac-cache")
MODEL_NAME = "elastico-iac"  # the registry's name (kept here so this module imports no MLflow)
DEFAULT_TRACKING_URI = "sqlite:///.elastico/mlflow.db"  # the registry's default store, without importing MLflow
LOOKUP_FILE = "lookup.json"


@dataclass(frozen=True)
class ChampionLoad:
    """What ``load_champion`` settled on, and the one line the caller should show."""

    predictor: SlowdownPredictor
    origin: str  # "registry" | "cache" | "fallback"
    version: int | None
    message: str


def _cached(cache: Path) -> tuple[int, StoredModel] | None:
    from elastico_core.iac.modelfile import load_model

    index = cache / "current.json"
    if not index.exists():
        return None
    doc = json.loads(index.read_text())
    version = int(doc["version"])
    return version, load_model(cache / f"v{version}" / "artifacts" / "model")


def _remember(cache: Path, version: int, run_id: str, uri: str) -> None:
    (cache / "current.json").write_text(json.dumps({"version": version, "run_id": run_id, "tracking_uri": uri}))


def _store_stamp(uri: str) -> float | None:
    """The SQLite store's modification time (any write to the store invalidates a cached lookup)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(uri.removeprefix("sqlite:///"))
    return path.stat().st_mtime if path.exists() else -1.0


def _note_lookup(cache: Path, uri: str, version: int | None) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        doc = {"tracking_uri": uri, "version": version, "at": time.time(), "store_stamp": _store_stamp(uri)}
        (cache / LOOKUP_FILE).write_text(json.dumps(doc))
    except OSError:  # a read-only working directory only costs the next lookup
        pass


def recent_lookup(cache: Path, uri: str, ttl_s: float) -> tuple[int | None, float] | None:
    """The registry's answer from a lookup younger than ``ttl_s`` against the same, unchanged store.

    Returns (champion version or None when none was registered, age in seconds); ``None`` when stale.
    The lookup itself (importing MLflow, opening the store) costs seconds; planning takes less.
    """
    try:
        doc = json.loads((cache / LOOKUP_FILE).read_text())
        age = time.time() - float(doc["at"])
        if doc["tracking_uri"] != uri or not 0 <= age < ttl_s or doc["store_stamp"] != _store_stamp(uri):
            return None
        return (None if doc["version"] is None else int(doc["version"])), age
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _predictor(stored: StoredModel, version: int, fallback: SlowdownPredictor) -> LearnedPredictor:
    from elastico_core.iac.learned import LearnedPredictor

    return LearnedPredictor(stored.model, name=f"{MODEL_NAME}@v{version}:{stored.kind.value}", fallback=fallback, bound=stored.bound)


def load_champion(
    *,
    tracking_uri: str | None = None,
    cache_dir: str | Path = DEFAULT_CACHE,
    name: str = MODEL_NAME,
    fallback: SlowdownPredictor | None = None,
    probe_timeout_s: float = 2.0,
    lookup_ttl_s: float = 0.0,
) -> ChampionLoad:
    """The champion as a ``SlowdownPredictor``; see the module doc for the order. Never raises.

    :param tracking_uri: MLflow tracking URI (default: ``$MLFLOW_TRACKING_URI``, else the embedded store)
    :param cache_dir: local cache folder (default ``.elastico/iac-cache`` in the working directory)
    :param name: registered model name
    :param fallback: predictor used when no model is available (default ``NoInterference``)
    :param probe_timeout_s: how long to wait for an HTTP tracking server before using the cache
    :param lookup_ttl_s: trust the registry's last answer (champion version, or none) for this long while the
        store is unchanged, instead of asking it again (0: always ask)
    """
    spare: SlowdownPredictor = fallback or NoInterference()
    cache = Path(cache_dir) / name
    problem = ""
    if lookup_ttl_s > 0:
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
        known = recent_lookup(cache, uri, lookup_ttl_s)
        if known is not None and known[0] is None:
            msg = (f"IAC: no {name}@champion registered at {uri} (asked {known[1]:.0f} s ago) — planning with the "
                   f"{spare.name!r} predictor")
            return ChampionLoad(spare, "fallback", None, msg)
        if known is not None:
            try:
                hit = _cached(cache)
                if hit is not None and hit[0] == known[0]:
                    version, stored = hit
                    msg = f"IAC: champion {name} v{version} ({stored.kind.value}), cached {known[1]:.0f} s ago from {uri}"
                    return ChampionLoad(_predictor(stored, version, spare), "cache", version, msg)
            except Exception:  # a refused cached copy: ask the registry
                pass
    try:
        from elastico_core.iac import registry
        from elastico_core.iac.modelfile import load_model

        uri = registry.tracking_uri(tracking_uri)
        ok, why = registry.reachable(uri, probe_timeout_s)
        if ok:
            ref = registry.champion_ref(uri, name)
            if ref is not None:
                folder = cache / f"v{ref.version}"
                stamp = folder / "run_id.txt"
                try:  # a cached copy of this very version (same run) saves the download
                    if not stamp.exists() or stamp.read_text() != ref.run_id:
                        raise FileNotFoundError(stamp)
                    stored = load_model(folder / "artifacts" / "model")
                except Exception:
                    shutil.rmtree(folder, ignore_errors=True)
                    stored = registry.download_version(uri, ref.version, folder, name)
                    stamp.write_text(ref.run_id)
                cache.mkdir(parents=True, exist_ok=True)
                _remember(cache, ref.version, ref.run_id, uri)
                _note_lookup(cache, uri, ref.version)
                msg = f"IAC: champion {name} v{ref.version} ({stored.kind.value}) from {uri}"
                log.info(msg)
                return ChampionLoad(_predictor(stored, ref.version, spare), "registry", ref.version, msg)
            problem = f"no {name}@champion registered at {uri}"
            _note_lookup(cache, uri, None)
        else:
            problem = f"MLflow at {uri} is unreachable ({why})"
    except Exception as exc:  # a store that fails mid-way counts as unreachable
        problem = f"MLflow failed ({type(exc).__name__}: {str(exc)[:160]})"
    try:
        hit = _cached(cache)
        if hit is not None:
            version, stored = hit
            msg = f"IAC: {problem}; using cached champion {name} v{version} ({stored.kind.value}) from {cache}"
            log.warning(msg)
            return ChampionLoad(_predictor(stored, version, spare), "cache", version, msg)
    except Exception as exc:
        problem = f"{problem}; cached model refused ({type(exc).__name__}: {str(exc)[:200]})"
    msg = f"IAC: {problem}; no cached model either — planning with the {spare.name!r} predictor"
    log.warning(msg)
    return ChampionLoad(spare, "fallback", None, msg)


class ChampionWatch:
    """The champion as it is now: asks the registry every ``interval_s`` in a background thread.

    ``current()`` returns the predictor in use (the same object until the champion's version changes),
    so a long-running controller plans with a newly promoted champion within ``interval_s`` without
    waiting on MLflow inside an epoch. A failed check keeps the predictor it has.
    """

    def __init__(self, initial: ChampionLoad, *, interval_s: float = 60.0, fallback: SlowdownPredictor | None = None,
                 tracking_uri: str | None = None, cache_dir: str | Path = DEFAULT_CACHE) -> None:
        import threading

        self._loaded = initial
        self.interval_s = interval_s
        self._fallback = fallback
        self._uri = tracking_uri
        self._cache = cache_dir
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iac-champion-watch", daemon=True)
        self._thread.start()

    def current(self) -> SlowdownPredictor:
        with self._lock:
            return self._loaded.predictor

    def check(self) -> bool:
        """Ask the registry once; True when the champion changed (and the new one was loaded)."""
        fresh = load_champion(tracking_uri=self._uri, cache_dir=self._cache, fallback=self._fallback)
        with self._lock:
            if fresh.origin == "fallback" or fresh.predictor.name == self._loaded.predictor.name:
                return False
            self._loaded = fresh
        log.info("IAC: the champion changed: %s", fresh.message)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as exc:  # the predictor in use stays
                log.warning("IAC: champion check failed (%s: %s)", type(exc).__name__, exc)

    def close(self) -> None:
        self._stop.set()
