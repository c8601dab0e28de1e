"""Soak: the adversarial probe's fault mix against a running controller with churning jobs (prints one JSON object).

    python -m elastico_core.state.soak --minutes 10 --state postgresql+psycopg2://u:p@127.0.0.1/soakdb
    python -m elastico_core.state.soak --minutes 10            # a fresh SQLite file in a temp dir

``elastico controller run`` runs as a child process on a copy of the shipped profiles and the example
cluster (8 A100-40GB). Beside it, in this process:

* a **submitter** registers jobs of the example workloads all along (a churning queue);
* a **launcher** starts what the controller admits, acknowledges switches, and after a while finishes
  each job with a report — mostly sane, one in five absurd (``peak_mem_mib=1e300``, a denormal or 1e300
  throughput, an OOM with 1e300 observed); one admitted job in ten is never started (the start deadline
  must give its GPU back), one in twenty crashes on its own (``report_failed``: its own fault);
* a **fault injector** every few seconds: a corrupt profile row (NaN, 1e300 memory, knobs ``{}``,
  ``micro_batch`` 0, 200k nested brackets, a 5,000-digit number), a truncated profile file, a FIFO named
  ``*.parquet``, a read-only spell of 4 s (PostgreSQL: ``default_transaction_read_only`` on the soak's own
  database and every open session ended, so all reconnect read-only, then off; SQLite: ``chattr +i`` on
  the database file, as root — in WAL mode writes still reach the ``-wal`` file, so this one rarely
  bites), or a SIGKILL of the controller (restarted 1-3 s later).

At the end (the controller stopped): every submitted job is in the state exactly once (``lost``), no job
failed that did not fail on its own (``failed_for_another``), no GPU is over-committed, and planning
never stalled beyond the backoff: for every fault window, the time from its end (or the controller's
restart) to the next epoch that ran is at most the backoff in force (``max_recovery_s`` against
``max_backoff_s``); the controller's exit code and every epoch line are counted from its log.
PostgreSQL's read-only spell uses ``ALTER DATABASE … SET``: give the soak a database of its own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = ("bert", "resnet50", "lstm", "ppo", "ncf", "dcgan", "transformer", "qwen-1.7b", "deepseek-1.5b")
PROFILE_FILE = "a100-40gb_40960_any_any.parquet"
INTERVAL_S = 1.0
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) elastico\.controller (\w+) (.*)$")
OK_LINE = re.compile(r"^(epoch \d+:|no change \(epoch|idle \(epoch|epoch skipped:)")
BAD_LINE = re.compile(r"^(epoch not run:|epoch failed:|state not available at start)")


@dataclass
class Tally:
    """What the soak did and saw (shared by its threads; each counter under the lock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    submitted: list[str] = field(default_factory=list)
    own_failures: set[str] = field(default_factory=set)  # jobs this launcher crashed on purpose (their own fault)
    bad_reports: int = 0
    never_started: set[str] = field(default_factory=set)
    faults: dict[str, int] = field(default_factory=dict)
    windows: list[tuple[str, float, float]] = field(default_factory=list)  # (fault, start, end) in time.time()
    errors: list[str] = field(default_factory=list)

    def count(self, fault: str) -> None:
        with self.lock:
            self.faults[fault] = self.faults.get(fault, 0) + 1


class Soak:
    def __init__(self, url: str, root: Path, seconds: float, seed: int) -> None:
        self.url, self.root, self.seconds = url, root, seconds
        self.rng = random.Random(seed)
        self.profiles = root / "profiles"
        self.log = root / "controller.log"
        self.stop = threading.Event()
        self.tally = Tally()
        self.proc: subprocess.Popen[bytes] | None = None
        self.proc_lock = threading.Lock()
        self.exit_codes: list[int] = []

    # ---- the controller ------------------------------------------------------------------------------
    def start_controller(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        cmd = [sys.executable, "-m", "elastico_core.cli", "controller", "run", "--interval", str(INTERVAL_S),
               "--cluster", str(REPO / "examples" / "cluster.yaml"), "--state", self.url, "--profiles",
               str(self.profiles), "--predictor", "table", "--start-deadline", "20", "--lease-ttl", "5"]
        with self.proc_lock, open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.root, env=env)

    def kill_controller(self) -> None:
        with self.proc_lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
                self.exit_codes.append(self.proc.wait())

    # ---- the threads ------------------------------------------------------------------------------------
    def _service(self) -> Any:
        from elastico_core.state import JobService

        while not self.stop.is_set():
            try:
                return JobService.open(self.url, upgrade=False)
            except Exception:
                time.sleep(0.5)
        return None

    def submitter(self) -> None:
        svc = self._service()
        n = 0
        while not self.stop.wait(self.rng.uniform(0.3, 1.2)):
            job_id = f"soak-{n:05d}"
            floor = self.rng.choice((10, 50, 100))
            try:
                svc.submit_document(f"jobs:\n  - {{id: {job_id}, workload: {self.rng.choice(WORKLOADS)}, floor: {floor}}}\n")
            except Exception as exc:  # read-only spell: this submit did not happen; try the next one
                self._note(exc)
                continue
            with self.tally.lock:
                self.tally.submitted.append(job_id)
            n += 1
        svc.close()

    def launcher(self) -> None:
        from elastico_core.state import JobStatus

        svc = self._service()
        started: dict[str, float] = {}
        while not self.stop.wait(0.5):
            try:
                jobs = svc.list_jobs([JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING])
            except Exception as exc:
                self._note(exc)
                continue
            for job in jobs:
                try:
                    self._launch(svc, job, started)
                except Exception as exc:  # a stale token (released, preempted) or a read-only spell
                    self._note(exc)
        svc.close()

    def _launch(self, svc: Any, job: Any, started: dict[str, float]) -> None:
        from elastico_core.state import JobStatus

        if job.id in self.tally.never_started:
            return
        if job.status is JobStatus.ADMITTED:
            if job.id not in started and self.rng.random() < 0.1:
                with self.tally.lock:
                    self.tally.never_started.add(job.id)
                return
            svc.report_started(job.id, job.token)
            started[job.id] = time.monotonic()
            return
        if job.status is JobStatus.SWITCHING:
            svc.acknowledge(job.id, job.token)
            return
        if time.monotonic() - started.setdefault(job.id, time.monotonic()) < self.rng.uniform(5, 25):
            return
        roll = self.rng.random()
        if roll < 0.05:
            svc.report_failed(job.id, job.token, "the workload crashed (soak: its own fault)")
            with self.tally.lock:
                self.tally.own_failures.add(job.id)
        elif roll < 0.25:
            with self.tally.lock:
                self.tally.bad_reports += 1
            kind = self.rng.choice(("peak", "denormal", "huge", "oom"))
            if kind == "oom":
                svc.report_oom(job.id, job.token, 1e300)
            else:
                tput = {"peak": 150.0, "denormal": 5e-324, "huge": 1e300}[kind]
                svc.report_finished(job.id, job.token, tput, peak_mem_mib=1e300 if kind == "peak" else 20000.0)
        else:
            svc.report_finished(job.id, job.token, self.rng.uniform(50, 5000), peak_mem_mib=self.rng.uniform(4000, 30000))
        started.pop(job.id, None)

    def injector(self) -> None:
        faults = ("row", "row", "truncate", "fifo", "read-only", "kill", "kill")
        while not self.stop.wait(self.rng.uniform(8, 20)):
            fault = self.rng.choice(faults)
            t0 = time.time()
            try:
                getattr(self, "_" + fault.replace("-", "_"))()
            except Exception as exc:
                self._note(exc)
                continue
            self.tally.count(fault)
            with self.tally.lock:
                self.tally.windows.append((fault, t0, time.time()))

    # ---- faults ---------------------------------------------------------------------------------------
    def _row(self) -> None:
        import polars as pl

        path = self.profiles / PROFILE_FILE
        try:
            df = pl.read_parquet(path)
        except Exception:  # truncated earlier: the controller moves it aside on its next write
            return
        if df.height == 0:
            return
        knobs = self.rng.choice(["{}", '{"amp":false,"checkpointing":false,"dp":1,"micro_batch":0}', "[" * 200_000,
                                 '{"micro_batch":' + "9" * 5000 + "}", df["knobs"][0]])
        column, value = self.rng.choice([("gpu_mem_mib", 1e300), ("throughput", float("nan")), ("throughput", 5e-324),
                                         ("sm", 7.0), ("gpu_mem_mib", -1.0)])
        row = df.head(1).with_columns(pl.lit(knobs).alias("knobs"), pl.lit(value, dtype=pl.Float64).alias(column),
                                      pl.lit("measured").alias("source"))
        tmp = path.with_suffix(".soak-tmp")
        pl.concat([df, row]).write_parquet(tmp)
        os.replace(tmp, path)

    def _truncate(self) -> None:
        (self.profiles / PROFILE_FILE).write_bytes(b"")

    def _fifo(self) -> None:
        path = self.profiles / f"zz-fifo-{self.rng.randrange(10**6)}.parquet"
        os.mkfifo(path)

    def _read_only(self) -> None:
        import sqlalchemy as sa

        from elastico_core.state.url import normalize_state_url

        url = normalize_state_url(self.url)
        if url.get_backend_name() == "sqlite":
            path = str(Path(url.database or "").absolute())
            if subprocess.run(["chattr", "+i", path], capture_output=True).returncode != 0:
                raise RuntimeError("chattr +i refused (needs root and ext4/xfs)")
            time.sleep(4)
            subprocess.run(["chattr", "-i", path], check=True)
            return
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            db = conn.exec_driver_sql("SELECT current_database()").scalar_one()
            conn.exec_driver_sql(f'ALTER DATABASE "{db}" SET default_transaction_read_only = on')
            # end the sessions open now (the controller's, this soak's clients'): they reconnect read-only,
            # as a failover to a standby or a restarted server makes them do
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            time.sleep(4)
            conn.exec_driver_sql(f'ALTER DATABASE "{db}" SET default_transaction_read_only = off')
        engine.dispose()

    def _kill(self) -> None:
        self.kill_controller()
        time.sleep(self.rng.uniform(1, 3))
        self.start_controller()

    def _note(self, exc: BaseException) -> None:
        with self.tally.lock:
            if len(self.tally.errors) < 20:
                self.tally.errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")

    # ---- run and check ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from elastico_core.state import JobService

        svc = JobService.open(self.url)  # create / migrate the state
        held = sum(svc.counts().values())
        svc.close()
        if held:
            raise SystemExit(f"the soak needs an empty state; this one holds {held} jobs (give it a fresh database)")
        self.start_controller()
        threads = [threading.Thread(target=t, daemon=True) for t in (self.submitter, self.launcher, self.injector)]
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        self.stop.set()
        for t in threads:
            t.join(60)
        with self.proc_lock:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                final = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                final = self.proc.wait()
        return self.check(final)

    def check(self, final_code: int) -> dict[str, Any]:
        from elastico_core.state import JobService, JobStatus

        svc = JobService.open(self.url, upgrade=False)
        jobs = {j.id: j for j in svc.list_jobs(limit=None)}
        ended = {j.id: j for j in svc.ended_jobs(limit=100_000)}
        jobs.update(ended)
        gpus = svc.gpus()
        svc.close()
        submitted = set(self.tally.submitted)
        failed = {j for j, v in jobs.items() if v.status is JobStatus.FAILED}
        own = {j for j in failed if j in self.tally.own_failures or "OOM" in jobs[j].reason}
        epochs = self._epochs()
        recoveries = self._recoveries(epochs)
        return {
            "seconds": self.seconds,
            "state": self.url.split(":", 1)[0],
            "submitted": len(submitted),
            "lost": len(submitted - set(jobs)),
            "failed": len(failed),
            "failed_own_fault": len(own),
            "failed_for_another": sorted(failed - own)[:20],
            "by_status": {s.value: sum(1 for v in jobs.values() if v.status is s) for s in JobStatus},
            "over_committed_gpus": [g.id for g in gpus if g.used_mem_mib > g.capacity_mib + 0.01],
            "bad_reports": self.tally.bad_reports,
            "never_started": len(self.tally.never_started),
            "faults": dict(sorted(self.tally.faults.items())),
            "epochs_ok": sum(1 for ok, _ in epochs if ok),
            "epochs_failed": sum(1 for ok, _ in epochs if not ok),
            "max_recovery_s": round(max((r for _, r in recoveries), default=0.0), 2),
            "max_recovery_s_by_fault": {f: round(max(r for g, r in recoveries if g == f), 2) for f in sorted({f for f, _ in recoveries})},
            "max_gap_between_epochs_s": round(max((b - a for a, b in itertools.pairwise(sorted(t for ok, t in epochs if ok))),
                                                  default=0.0), 2),
            "recoveries": [{"fault": f, "s": round(r, 2)} for f, r in recoveries],
            "max_backoff_s": 60.0,
            "profile_files_moved_aside": len(list(self.profiles.glob("*.corrupt-*"))),
            "controller_exit_code": final_code,
            "client_errors_seen": self.tally.errors[:10],
        }

    def _epochs(self) -> list[tuple[bool, float]]:
        """(ran, time) of every epoch line the controller logged."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            m = LINE.match(line)
            if not m:
                continue
            at = dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if OK_LINE.match(m[3]):
                out.append((True, at))
            elif BAD_LINE.match(m[3]):
                out.append((False, at))
        return out

    def _recoveries(self, epochs: list[tuple[bool, float]]) -> list[tuple[str, float]]:
        """Per fault window: seconds from its end to the next epoch that ran."""
        oks = sorted(t for ok, t in epochs if ok)
        out = []
        for fault, _, end in self.tally.windows:
            nxt = next((t for t in oks if t >= end), None)
            if nxt is not None:
                out.append((fault, nxt - end))
        return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--state", default=None, help="state URL (default: a fresh SQLite file); PostgreSQL: a database of its own")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="keep the soak's folder here (logs, profiles)")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="elastico-soak-"))
    (root / "profiles").mkdir()
    for f in (REPO / "profiles").glob("*.parquet"):
        shutil.copy(f, root / "profiles" / f.name)
    url = args.state or f"sqlite:///{root / 'state.db'}"
    try:
        result = Soak(url, root, args.minutes * 60, args.seed).run()
        print(json.dumps(result, indent=2))
    finally:
        if args.keep is not None:  # the FIFOs it planted are not copied
            shutil.copytree(root, args.keep, dirs_exist_ok=True,
                            ignore=lambda d, names: [n for n in names if (Path(d) / n).is_fifo()])
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
