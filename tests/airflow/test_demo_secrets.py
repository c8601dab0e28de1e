"""The demo's environment keeps its secrets to the owner: 0600 files, and a password Airflow never prints."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_secrets_are_private_and_never_logged(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "scripts" / "demo").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "demo" / "env.sh", root / "scripts" / "demo" / "env.sh")
    (root / ".airflow").mkdir()
    old = root / ".airflow" / "demo-jwt-secret"
    old.write_text("x" * 96 + "\n")
    old.chmod(0o644)  # left by a run made before the rule
    script = f'set -euo pipefail; source "{root}/scripts/demo/env.sh"; echo > "$ROOT/.elastico/new.log"'
    env = {**os.environ, "VENV": str(Path(sys.executable).parent.parent)}
    subprocess.run(["bash", "-c", script], check=True, env=env, cwd=root, timeout=120)
    secrets = [root / ".airflow" / "demo-jwt-secret", root / ".airflow" / "simple_auth_manager_passwords.json.generated"]
    assert json.loads(secrets[1].read_text())["admin"]
    for path in [*secrets, root / ".elastico" / "new.log"]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.name} is readable by others ({oct(mode)})"
