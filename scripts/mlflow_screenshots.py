"""Screenshots of MLflow after ``make demo``: an experiment opening on its runs, the registry with @champion.

Starts the MLflow UI on the demo's store (127.0.0.1, a free port), opens it in headless Chromium (Debian's
/usr/bin/chromium through Playwright) and writes PNGs to docs/screenshots/. Stops the server on exit.
Usage: .venv/bin/python scripts/mlflow_screenshots.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "docs/screenshots")
    args = ap.parse_args()
    store = ROOT / ".elastico/mlflow.db"
    if not store.exists():
        print("error: no MLflow store at .elastico/mlflow.db: run make demo first", file=sys.stderr)
        return 2
    import mlflow
    from playwright.sync_api import sync_playwright

    uri = f"sqlite:///{store}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("elastico/training_runs")
    if exp is None:
        print("error: no elastico/training_runs experiment: run make demo first", file=sys.stderr)
        return 2
    port = free_port()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [str(bin_dir / "mlflow"), "server", "--app-name", "elastico", "--host", "127.0.0.1", "--port", str(port), "--backend-store-uri", uri,
         "--default-artifact-root", (ROOT / ".elastico/mlartifacts").as_uri(), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 850})
            page.goto(f"{base}/#/experiments/{exp.experiment_id}?workflowType=machine_learning")
            page.get_by_text("training_runs.train", exact=False).first.wait_for(timeout=60_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(args.out / "mlflow-experiment-runs.png"))
            page.goto(f"{base}/#/models/elastico-iac?workflowType=machine_learning")
            page.get_by_text("champion", exact=False).first.wait_for(timeout=60_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(args.out / "mlflow-registry-champion.png"))
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    print(f"wrote {args.out / 'mlflow-experiment-runs.png'} and {args.out / 'mlflow-registry-champion.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
