"""The scheduling-status page in a real api-server on 127.0.0.1: behind Airflow's authentication, showing
the state's GPUs, jobs, queue, prices, decisions and measurements — in JSON and in headless Chromium.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import (
    AIRFLOW_HOME,
    REPO,
    TINY_CLUSTER,
    bin_path,
    free_port,
    kill_group,
    run_epochs,
    start_group,
)

CHROMIUM = Path("/usr/bin/chromium")
PASSWORD = "status-page-test-pass"
VIEWER_PASSWORD = "status-page-viewer-pass"
SECRET = "pw-status-never-shown-9931"
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _state(tmp: Path) -> str:
    """Five jobs on a two-GPU cluster: two co-located and running (one with a measured throughput), one alone,
    two queued with the controller's reasons."""
    from elastico_core.state import ExternalIdentity, JobService

    cluster = tmp / "cluster.yaml"
    cluster.write_text(TINY_CLUSTER)
    url = f"sqlite:///{tmp / 'state.db'}"
    svc = JobService.open(url)
    jobs = {
        "bert": {"workload": "bert", "floor": 50, "knobs": {"micro_batch": [128]}, "weight": 2},
        "qwen": {
            "workload": "qwen-1.7b",
            "floor": 100,
            # small enough to share a GPU: three jobs for two GPUs make a pair without the local search
            "knobs": {"max_model_len": [4096], "gpu_memory_utilization": [0.4]},
        },
        "lstm": {"workload": "lstm", "floor": 100},
        "mistral": {"workload": "mistral-7b", "floor": 50, "knobs": {"gpu_memory_utilization": [0.9]}},
        "llama": {"workload": "llama-3-7b", "floor": 50, "knobs": {"gpu_memory_utilization": [0.9]}},
    }
    ids = {
        k: svc.register(v, ExternalIdentity.airflow("status", "r1", k), try_number=1).job.id for k, v in jobs.items()
    }
    run_epochs(url, cluster, REPO / "profiles", n=2)
    for job in svc.list_jobs():
        if job.status.value == "admitted":
            svc.report_started(job.id, job.token)
    lstm = svc.get(ids["lstm"])
    if lstm.status.value == "running":
        svc.report_throughput(lstm.id, lstm.token, 1234.5, steps=12, done=1200.0, total_steps=20,
                              measured_on="cpu-test|1024|1c|torch")
    svc.close()
    return url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, airflow_db: Path) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("status")
    url = _state(tmp)
    port = free_port()
    (AIRFLOW_HOME / "simple_auth_manager_passwords.json.generated").write_text(
        json.dumps({"admin": PASSWORD, "viewer": VIEWER_PASSWORD}))
    env = {
        **os.environ,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "ELASTICO_STATE_URL": "sqlite:////nonexistent/x.db",
        "AIRFLOW_CONN_ELASTICO_DEFAULT": json.dumps(
            {"conn_type": "elastico", "password": SECRET, "extra": {"state_url": url}}
        ),
    }
    proc = start_group(
        [bin_path("airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)], tmp / "api-server.log", env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        from tests.airflow.conftest import wait_until

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None, (tmp / "api-server.log").read_text()[-3000:]
                return False

        wait_until(healthy, 180, "the api-server", interval=1.0)
        token = _call(base, "POST", "/auth/token", {"username": "admin", "password": PASSWORD})["access_token"]
        viewer = _call(base, "POST", "/auth/token", {"username": "viewer", "password": VIEWER_PASSWORD})["access_token"]
        yield {"base": base, "token": token, "viewer": viewer, "state_url": url, "tmp": tmp}
    finally:
        kill_group(proc)


def _call(base: str, method: str, path: str, body: Any = None, token: str = "", cookie: str = "",
          headers: dict[str, str] | None = None) -> Any:
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(), method=method)
    req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if cookie:
        req.add_header("Cookie", cookie)
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return json.loads(raw) if resp.headers.get_content_type() == "application/json" else raw.decode()


def _status(base: str, path: str, **kw: Any) -> int:
    try:
        _call(base, "GET", path, **kw)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def test_requests_without_a_valid_session_are_refused(server: dict[str, Any]) -> None:
    base = server["base"]
    for path in ("/elastico/status", "/elastico/api/status", "/elastico/"):
        assert _status(base, path) == 401, path
        assert _status(base, path, token="not-a-token") in (401, 403), path
        assert _status(base, path, cookie="_token=forged.jwt.value") in (401, 403), path
        assert _status(base, path, token=server["token"]) == 200, path
        assert _status(base, path, cookie=f"_token={server['token']}") == 200, path


def test_the_page_without_a_session_leads_to_the_login(server: dict[str, Any]) -> None:
    """A browser (Accept: text/html) is sent to Airflow's login, which brings it back; the JSON API says 401."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(server["base"] + "/elastico/status", headers={"Accept": "text/html,*/*"})
    with pytest.raises(urllib.error.HTTPError) as info:
        opener.open(req, timeout=30)
    assert info.value.code == 303
    location = info.value.headers["Location"]
    assert "/login" in location and "next=%2Felastico%2Fstatus" in location
    api = urllib.request.Request(server["base"] + "/elastico/api/status", headers={"Accept": "text/html,*/*"})
    with pytest.raises(urllib.error.HTTPError) as info:
        opener.open(api, timeout=30)
    assert info.value.code == 401


def test_nodes_queue_positions_and_links(server: dict[str, Any]) -> None:
    """The node view sums what each job holds; the queue has positions and reasons in units; jobs link to Airflow."""
    data = _call(server["base"], "GET", "/elastico/api/status", token=server["token"])
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes, "expected the controller's cluster"
    for n in nodes.values():
        assert n["cpu_cores"] > 0 and n["host_mem_mib"] > 0 and 0 <= n["gpus_busy"] <= n["gpus"]
        assert n["cpu_used"] == pytest.approx(sum(j["cpu_cores"] for j in n["jobs"]))
        assert n["host_used_mib"] == pytest.approx(sum(j["host_mem_mib"] for j in n["jobs"]))
    held = {j["id"] for n in nodes.values() for j in n["jobs"]}
    assert held == {j["id"] for g in data["gpus"] for j in g["jobs"]}
    assert all(j["cpu_cores"] > 0 and j["host_mem_mib"] > 0 for n in nodes.values() for j in n["jobs"])
    assert [q["position"] for q in data["queue"]] == list(range(1, len(data["queue"]) + 1))
    for q in data["queue"]:
        assert q["why"] and q["unit"] in ("samples/s", "tokens/s")
        assert not q["reason"].startswith(f"{q['queue_code']}: ")
    job = next(j for g in data["gpus"] for j in g["jobs"])
    links = job["links"]
    assert links["task_instance"].startswith("/dags/status/runs/r1/tasks/")
    assert links["log"].startswith(links["task_instance"]) and "try_number=1" in links["log"]
    measured = [s["job_id"] for s in data["slowdowns"]]
    assert len(measured) == len(set(measured)), "one row per job"


def test_json_api_matches_the_state(server: dict[str, Any]) -> None:
    from elastico_core.state import JobService

    data = _call(server["base"], "GET", "/elastico/api/status", token=server["token"])
    svc = JobService.open(server["state_url"])
    try:
        gpus = {g.id: g for g in svc.gpus()}
        assert {g["id"] for g in data["gpus"]} == set(gpus)
        for g in data["gpus"]:
            active = [j for j in gpus[g["id"]].jobs if svc.get(j).status.holds_gpus]
            assert [j["id"] for j in g["jobs"]] == active
            assert g["used_mem_mib"] == pytest.approx(gpus[g["id"]].used_mem_mib)
            for j in g["jobs"]:
                plan = svc.get(j["id"]).plan
                assert j["knobs"] == plan.knobs.as_dict() and j["memory_mib"] == pytest.approx(plan.memory_mib)
        pending = [j for j in svc.list_jobs() if j.status.value == "pending"]
        assert [q["id"] for q in data["queue"]] == [j.id for j in pending]
        assert all(q["reason"] for q in data["queue"])
        assert any(len(g["jobs"]) == 2 for g in data["gpus"]), "expected a co-located pair"
        assert data["decisions"] and data["prices"]["epochs"] == [p.epoch for p in svc.prices()]
        assert any(s["measured_throughput"] == 1234.5 for s in data["slowdowns"])
    finally:
        svc.close()
    text = json.dumps(data)
    assert SECRET not in text and server["state_url"] not in text and "sqlite:///" not in text


def test_plugin_is_listed_with_its_menu_entry(server: dict[str, Any]) -> None:
    """The menu entry is a react_app (rendered in Airflow's own page), not an iframe of the page."""
    plugins = _call(server["base"], "GET", "/api/v2/plugins", token=server["token"])["plugins"]
    ours = next(p for p in plugins if p["name"] == "elastico")
    assert ours["fastapi_apps"][0]["url_prefix"] == "/elastico"
    (app,) = ours["react_apps"]
    assert app["bundle_url"] == "/elastico/static/status-app.js" and app["category"] == "browse"
    assert not ours["external_views"]
    bundle = _call(server["base"], "GET", app["bundle_url"], token=server["token"])
    assert "globalThis.AirflowPlugin" in bundle and "X-ElastiCo-CSRF" in bundle
    html = _call(server["base"], "GET", "/elastico/status", token=server["token"])
    assert "<svg" in html and 'id="price-chart"' in html and SECRET not in html
    assert 'id="gpu-timeline"' in html and 'data-col="progress"' in html and "12/20 steps (60%)" in html
    fragment = _call(server["base"], "GET", "/elastico/status/fragment", token=server["token"])
    assert fragment.startswith('<div class="eco"') and "<html" not in fragment


def _csrf(server: dict[str, Any], token: str) -> str:
    import re

    html = _call(server["base"], "GET", "/elastico/status/fragment", token=token)
    found = re.search(r'data-csrf="([^"]+)"', html)
    assert found, "the page carries its CSRF token"
    return found.group(1)


def _post(server: dict[str, Any], path: str, token: str, headers: dict[str, str]) -> tuple[int, Any]:
    try:
        return 200, _call(server["base"], "POST", path, {}, token=token, headers=headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_cancel_needs_the_pages_token_a_same_origin_and_the_right_to_change_the_dag(server: dict[str, Any]) -> None:
    from elastico_core.state import JobService

    svc = JobService.open(server["state_url"])
    try:
        victim = next(j for j in svc.list_jobs() if j.status.value == "pending")
    finally:
        svc.close()
    path = f"/elastico/api/jobs/{victim.id}/cancel"
    admin = server["token"]
    code, body = _post(server, path, admin, {})
    assert code == 403 and "CSRF" in body["detail"]  # a logged-in browser tricked into posting has no token
    code, _ = _post(server, path, admin, {"X-ElastiCo-CSRF": "1.forged"})
    assert code == 403
    viewer_token = _csrf(server, server["viewer"])
    code, _ = _post(server, path, admin, {"X-ElastiCo-CSRF": viewer_token})
    assert code == 403, "a token is bound to the user it was minted for"
    code, body = _post(server, path, server["viewer"], {"X-ElastiCo-CSRF": viewer_token})
    assert code == 403 and "may not change runs of status" in body["detail"]
    token = _csrf(server, admin)
    code, _ = _post(server, path, admin, {"X-ElastiCo-CSRF": token, "Origin": "http://evil.example"})
    assert code == 403
    code, _ = _post(server, "/elastico/api/jobs/ghost/cancel", admin, {"X-ElastiCo-CSRF": token})
    assert code == 404
    code, body = _post(server, path, admin, {"X-ElastiCo-CSRF": token, "Origin": server["base"]})
    assert code == 200 and body == {"id": victim.id, "was": "pending", "status": "cancelled"}
    svc = JobService.open(server["state_url"])
    try:
        job = svc.get(victim.id)
        assert job.status.value == "cancelled" and "cancelled by admin from the status page" in job.reason
        svc.requeue(victim.id)  # as it was, for the other tests of this module
    finally:
        svc.close()


def test_the_page_filters_by_dag_user_queue_and_job(server: dict[str, Any]) -> None:
    data = _call(server["base"], "GET", "/elastico/api/status?dag=status", token=server["token"])
    assert data["running"] and data["filter"]["dag"] == "status" and data["choices"]["dag"] == ["status"]
    none = _call(server["base"], "GET", "/elastico/api/status?dag=other", token=server["token"])
    assert none["running"] == [] and none["queue"] == [] and none["gpus"], "the cluster views stay whole"
    one = data["running"][0]["id"]
    just = _call(server["base"], "GET", f"/elastico/api/status?job={one}", token=server["token"])
    assert [r["id"] for r in just["running"]] == [one] and just["queue"] == []


@pytest.mark.browser
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
)
def test_page_in_headless_chromium_shows_the_state(server: dict[str, Any], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from elastico_core.state import JobService

    svc = JobService.open(server["state_url"])
    try:
        expected = {g.id: [j for j in g.jobs if svc.get(j).status.holds_gpus] for g in svc.gpus()}
        queued = [j.id for j in svc.list_jobs() if j.status.value == "pending"]
    finally:
        svc.close()
    with sync_playwright() as p:
        # Playwright gives every launch a fresh temporary profile (a new --user-data-dir) and adds --headless
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROME_FLAGS[1:])
        try:
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{server['base']}/elastico/status")
            page.wait_for_selector("input[name=username]", timeout=60_000)  # no session: Airflow's login, nothing shown
            assert "login" in page.url and SECRET not in page.content()
            context.add_cookies([{"name": "_token", "value": server["token"], "url": server["base"]}])
            page.goto(f"{server['base']}/elastico/status")
            page.wait_for_selector("#gpus")
            nodes = page.query_selector_all("div.node[data-node]")
            assert nodes and all(n.query_selector(".meter") for n in nodes)
            node_jobs = {r.get_attribute("data-job") for n in nodes for r in n.query_selector_all("tr[data-job]")}
            assert node_jobs == {j for jobs in expected.values() for j in jobs}
            positions = [c.inner_text() for c in page.query_selector_all("#queue td[data-position]")]
            assert positions == [f"#{i}" for i in range(1, len(queued) + 1)]
            link = page.query_selector("div.gpu a[data-link=task_instance]")
            assert link is not None and link.get_attribute("href").startswith("/dags/status/runs/r1/tasks/")
            shown = {
                el.get_attribute("data-gpu"): [
                    r.get_attribute("data-job") for r in el.query_selector_all("tr[data-job]")
                ]
                for el in page.query_selector_all("div.gpu[data-gpu]")
            }
            assert shown == expected
            queue_ids = [r.get_attribute("data-job") for r in page.query_selector_all("#queue tr[data-job]")]
            assert queue_ids == queued
            assert page.query_selector("#price-chart polyline, #price-chart circle") is not None
            assert page.query_selector("#decisions") is not None and page.query_selector("#slowdowns") is not None
            assert SECRET not in page.content()
            page.set_viewport_size({"width": 1280, "height": 900})
            page.screenshot(path=str(tmp_path / "status.png"), full_page=True)
            shots = os.environ.get("ELASTICO_SCREENSHOTS")  # docs/screenshots when refreshing the manual's images
            if shots:
                Path(shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(shots) / "status-page.png"), full_page=True)
                page.locator("#nodes").screenshot(path=str(Path(shots) / "status-nodes.png"))
                page.locator("#queue").screenshot(path=str(Path(shots) / "status-queue.png"))

            # and through Airflow's menu: log in with the form, Browse -> "ElastiCo scheduling" (no iframe: the
            # plugin's React app renders the page inside Airflow's own), then follow a job's task link
            ui = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            ui.goto(f"{server['base']}/")
            ui.wait_for_selector("input[name=username]", timeout=60_000)
            ui.fill("input[name=username]", "admin")
            ui.fill("input[name=password]", PASSWORD)
            ui.keyboard.press("Enter")
            ui.wait_for_url(lambda u: "login" not in u, timeout=60_000)
            open_from_menu(ui)
            ui.locator("div.gpu[data-gpu]").first.wait_for(timeout=60_000)
            assert ui.locator("iframe").count() == 0
            assert ui.locator("div.gpu[data-gpu]").count() == len(expected)
            cells = [c.inner_text() for c in ui.locator("#running td.progress").all()]
            assert any(c.startswith("12/20 steps (60%)") for c in cells), cells  # the job that reported progress
            assert ui.locator("#gpu-timeline svg").count() == 1
            if shots:
                ui.screenshot(path=str(Path(shots) / "status-in-airflow.png"))
            task = ui.locator("div.gpu a[data-link=task_instance]").first
            href = task.get_attribute("href")
            task.click()  # Airflow's router takes it: the top window shows the task instance
            ui.wait_for_url(lambda u: u.endswith(href), timeout=60_000)
            ui.locator("[data-elastico-app]").wait_for(state="detached", timeout=30_000)  # left, in the top window
            # cancel from the page: a confirm dialog, then the job is gone from the queue
            open_from_menu(ui)
            row = ui.locator("#queue tr[data-job]").first
            victim = row.get_attribute("data-job")
            ui.once("dialog", lambda dialog: dialog.accept())
            row.locator("button[data-cancel]").click()
            ui.wait_for_function(f"!document.querySelector('#queue tr[data-job=\"{victim}\"]')", timeout=60_000)
            svc = JobService.open(server["state_url"])
            try:
                assert svc.get(victim).status.value == "cancelled"
                svc.requeue(victim)
            finally:
                svc.close()
        finally:
            browser.close()


def open_from_menu(ui: Any) -> None:
    """Browse -> "ElastiCo scheduling" in Airflow's navigation (as a person finds it, not by URL)."""
    ui.get_by_role("button", name="Browse").click()
    ui.get_by_role("menuitem", name="ElastiCo scheduling").click()
    ui.wait_for_url(lambda u: u.rstrip("/").endswith("/plugin/elastico-status"), timeout=60_000)
