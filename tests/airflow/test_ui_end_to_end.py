"""What a platform engineer does after ``make ui``, in a real browser (Debian's Chromium via Playwright):

log in to Airflow, trigger ``training_runs`` from its page with the defaults, open Browse -> "ElastiCo
scheduling" (Airflow's menu), watch a job's progress and the GPU timeline, follow a job's task link into
Airflow and its MLflow link into MLflow, and open MLflow from its experiment list onto the runs. The whole
embedded stack runs (``scripts/ui.sh``: api-server, scheduler, dag-processor, triggerer, the controller
with its MLflow follower, MLflow's server) in a scratch root; ``ELASTICO_SCREENSHOTS=docs/screenshots``
retakes the manual's screenshots from this run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import REPO, free_port, wait_until
from tests.airflow.test_status_page import CHROME_FLAGS, CHROMIUM, open_from_menu

pytestmark = [
    pytest.mark.slow,
    pytest.mark.airflow,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
MODELS = {"resnet", "bert", "dcgan", "lstm"}  # training_runs' default runs


def _json(url: str, token: str = "") -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _healthy(base: str) -> bool:
    try:
        h = _json(f"{base}/api/v2/monitor/health")
    except OSError:
        return False
    return all(h[k]["status"] == "healthy" for k in ("metadatabase", "scheduler", "triggerer", "dag_processor"))


def _mlflow_app_path(tmp: Path) -> str:
    """Where MLflow finds ElastiCo's server app: the installed entry point, else one declared for this test
    (a checkout installed before the entry point existed)."""
    if any(ep.name == "elastico" for ep in entry_points(group="mlflow.app")):
        return ""
    info = tmp / "entry" / "elastico_mlflow_app-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: elastico-mlflow-app\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[mlflow.app]\nelastico = elastico_core.cli.mlflow_ui:app\n")
    return str(tmp / "entry")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("ui")
    root = tmp / "repo"
    root.mkdir()
    shutil.copytree(REPO / "scripts", root / "scripts")
    shutil.copytree(REPO / "profiles", root / "profiles")  # the controller writes measurements into its copy
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")  # the project's state setting
    for name in ("dags", "plugins"):
        (root / name).symlink_to(REPO / name)
    port, mlflow_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ELASTICO_", "MLFLOW_"))}
    extra = _mlflow_app_path(tmp)
    env.update(VENV=str(Path(sys.executable).parent.parent), ELASTICO_DEMO_PORT=str(port),
               ELASTICO_MLFLOW_PORT=str(mlflow_port),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), extra, env.get("PYTHONPATH", "")) if p))
    log = (tmp / "ui.log").open("w")
    proc = subprocess.Popen(["bash", str(root / "scripts/ui.sh")], cwd=root, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert proc.poll() is None, (tmp / "ui.log").read_text()[-3000:]
            return "Ctrl-C stops" in (tmp / "ui.log").read_text() and _healthy(base)

        wait_until(ready, 300, "make ui's Airflow, controller and MLflow", interval=2.0)
        password = json.loads((root / ".airflow/simple_auth_manager_passwords.json.generated").read_text())["admin"]
        token = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{base}/auth/token", data=json.dumps({"username": "admin", "password": password}).encode(),
            headers={"Content-Type": "application/json"}), timeout=30).read())["access_token"]
        yield {"base": base, "mlflow": f"http://127.0.0.1:{mlflow_port}", "password": password, "token": token,
               "root": root, "tmp": tmp}
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=90)
        log.close()


def _browser(p: Any) -> Any:
    return p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROME_FLAGS[1:])


def _login(page: Any, stack: dict[str, Any]) -> None:
    page.goto(f"{stack['base']}/")
    page.wait_for_selector("input[name=username]", timeout=120_000)
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", stack["password"])
    page.keyboard.press("Enter")
    page.wait_for_url(lambda u: "login" not in u, timeout=60_000)


def _shot(page: Any, name: str, **kw: Any) -> None:
    folder = os.environ.get("ELASTICO_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), **kw)


def test_a_platform_engineers_afternoon(stack: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    base, token = stack["base"], stack["token"]
    with sync_playwright() as p:
        browser = _browser(p)
        try:
            ui = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            _login(ui, stack)

            # trigger training_runs from its page, changing nothing in the form
            ui.goto(f"{base}/dags/training_runs")
            ui.get_by_role("button", name="Trigger Dag").click()
            trigger = ui.get_by_role("dialog").get_by_role("button", name="Trigger", exact=True)
            trigger.wait_for(timeout=60_000)
            assert trigger.is_enabled(), "the defaults are a valid run: Trigger is not disabled"
            _shot(ui, "airflow-trigger-defaults.png")
            trigger.click()
            runs = wait_until(lambda: _json(f"{base}/api/v2/dags/training_runs/dagRuns", token)["dag_runs"], 60,
                              "the DAG run the form created")
            run_id = runs[0]["dag_run_id"]

            # Browse -> "ElastiCo scheduling": a job's progress in the running table, the GPU timeline
            open_from_menu(ui)
            ui.locator("#eco").wait_for(timeout=60_000)
            steps = re.compile(r"^\d+/20 steps \(\d+%\)")

            def progress_shown() -> bool:
                cells = [c.inner_text() for c in ui.locator("#running td.progress").all()]
                if any(steps.match(c) for c in cells):
                    return True
                ui.reload()  # now, not at the page's next 10-second refresh: the default runs are short
                ui.locator("#eco").wait_for(timeout=60_000)
                return False

            wait_until(progress_shown, 300, "a running job's progress on the page", interval=1.0)
            assert ui.locator("#gpu-timeline svg").count() == 1
            assert ui.locator("iframe").count() == 0
            _shot(ui, "status-progress-live.png")

            # the job's task link: Airflow's own page of that task instance, in the top window
            link = ui.locator("#running a[data-link=task_instance]").first
            href = link.get_attribute("href")
            assert re.fullmatch(r"/dags/training_runs/runs/[^/]+/tasks/train/mapped/[0-3]", href), href
            link.click()
            ui.wait_for_url(re.compile(r".*/dags/training_runs/runs/[^/]+/tasks/train/mapped/[0-3]$"), timeout=60_000)
            ui.locator("[data-elastico-app]").wait_for(state="detached", timeout=30_000)  # left, in the top window

            # its MLflow link: the job's run in MLflow (created when the job started, by the controller)
            def mlflow_link() -> str | None:
                open_from_menu(ui)
                ui.locator("#eco").wait_for(timeout=60_000)
                found = ui.locator("a[data-link=mlflow_run]")
                return found.first.get_attribute("href") if found.count() else None

            run_url = wait_until(mlflow_link, 180, "a job's MLflow link on the page", interval=5.0)
            job_row = ui.locator("tr[data-job]", has=ui.locator("a[data-link=mlflow_run]")).first
            job_id = job_row.get_attribute("data-job")
            ui.locator("a[data-link=mlflow_run]").first.click()
            ui.wait_for_url(lambda u: u.startswith(stack["mlflow"]) and "/runs/" in u, timeout=60_000)
            ui.get_by_text(job_id).first.wait_for(timeout=120_000)
            assert ui.url.split("?")[0] == run_url.split("?")[0]
            _shot(ui, "mlflow-job-run.png")

            # the whole run succeeds; every mapped task is named after its model, not 0..3
            def run_state() -> str:
                return str(_json(f"{base}/api/v2/dags/training_runs/dagRuns/{run_id}", token)["state"])

            wait_until(lambda: run_state() in ("success", "failed"), 600, "the DAG run to end", interval=5.0)
            tis = _json(f"{base}/api/v2/dags/training_runs/dagRuns/{run_id}/taskInstances?limit=100", token)
            train = [t for t in tis["task_instances"] if t["task_id"] == "train"]
            assert run_state() == "success", [(t["map_index"], t["state"]) for t in train]
            assert {t["rendered_map_index"] for t in train} == MODELS
            ui.goto(f"{base}/dags/training_runs/runs/{run_id}")
            ui.get_by_text("dcgan").first.wait_for(timeout=60_000)
            _shot(ui, "airflow-mapped-names.png")

            # MLflow from its experiment list, in a browser that never chose a view: lands on the runs
            fresh = browser.new_context(viewport={"width": 1300, "height": 800}).new_page()
            fresh.goto(f"{stack['mlflow']}/#/experiments")
            fresh.get_by_role("link", name="elastico/training_runs").click()
            fresh.wait_for_url(re.compile(r".*/experiments/\d+/runs.*"), timeout=60_000)
            fresh.get_by_text(job_id).first.wait_for(timeout=60_000)  # the runs table, not a GenAI overview
            _shot(fresh, "mlflow-experiment-runs.png")
        finally:
            browser.close()
    _runs_hold_the_jobs(stack, job_id)


def _runs_hold_the_jobs(stack: dict[str, Any], job_id: str) -> None:
    """The job's run: started when the job started, a throughput series, its plan, a link to its task."""
    import mlflow

    from elastico_core.state import JobService, StateStore
    from elastico_core.state.probe import read_only_url, require_state

    uri = f"sqlite:///{stack['root'] / '.elastico/mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("elastico/training_runs")
    (run,) = client.search_runs([exp.experiment_id], filter_string=f"tags.`elastico.job_id` = '{job_id}'")
    svc = JobService(StateStore.open(read_only_url(require_state(f"sqlite:///{stack['root'] / '.elastico/state.db'}").url),
                                     upgrade=False))
    try:
        job = svc.get(job_id)
    finally:
        svc.close()
    assert run.info.start_time == int(job.started_at.timestamp() * 1000) and run.info.status == "FINISHED"
    assert client.get_metric_history(run.info.run_id, "throughput")
    assert any(k.startswith("plan.") for k in run.data.params)
    assert "/dags/training_runs/runs/" in run.data.tags["mlflow.note.content"]
