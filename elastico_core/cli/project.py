"""Where the planner state is when no flag says: the project's own setting, found the way ruff and pytest find theirs.

Precedence (the edge resolves it once and passes the URL down):

1. ``--state URL`` on the command line;
2. ``$ELASTICO_STATE_URL``;
3. ``state`` under ``[tool.elastico]`` in the nearest ``pyproject.toml`` above the working directory — a
   URL, or a SQLite path relative to that file's folder (this repository ships ``.elastico/state.db``:
   the demo, ``make ui`` and the command line all use it, from any sub-folder);
4. ``.elastico/state.db`` in the working directory.

Reading the setting creates nothing: a missing file is reported by the command that needed a state.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from elastico_core.model.errors import SpecError
from elastico_core.state.url import DEFAULT_STATE_URL, ENV_STATE_URL

PROJECT_FILE = "pyproject.toml"
TABLE = "elastico"  # [tool.elastico]


@dataclass(frozen=True, slots=True)
class StateSetting:
    """A state URL and where it came from (said in ``elastico state where`` and in error lines)."""

    url: str
    source: str


def find_project(start: Path | None = None) -> tuple[Path, dict[str, object]] | None:
    """The nearest ``pyproject.toml`` with a ``[tool.elastico]`` table at or above ``start``, and that table."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_FILE
        if not candidate.is_file():
            continue
        try:
            data = tomllib.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"not a readable TOML file ({exc})", where=str(candidate)) from None
        table = data.get("tool", {}).get(TABLE) if isinstance(data.get("tool"), dict) else None
        if isinstance(table, dict):
            return candidate, table
    return None


def _project_url(value: object, project: Path) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError("must be a non-empty string (a state URL or a SQLite path)", where=f"{project} [tool.elastico]",
                        field="state")
    text = value.strip()
    if text.startswith("sqlite:///") and not text.startswith("sqlite:////"):
        text = text.removeprefix("sqlite:///")  # a relative SQLite URL: relative to the project, like a path
    if "://" in text:
        return text
    path = Path(text)
    return f"sqlite:///{(path if path.is_absolute() else project.parent / path).as_posix()}"


def resolve_state(flag: str | None, env: dict[str, str] | None = None, start: Path | None = None) -> StateSetting:
    """The state URL a command uses, by the precedence of the module docstring."""
    if flag is not None and flag.strip():
        return StateSetting(flag.strip(), "--state")
    environ = os.environ if env is None else env
    value = (environ.get(ENV_STATE_URL) or "").strip()
    if value:
        return StateSetting(value, f"${ENV_STATE_URL}")
    found = find_project(start)
    if found is not None and "state" in found[1]:
        project, table = found
        return StateSetting(_project_url(table["state"], project), f"{project} [tool.elastico] state")
    return StateSetting(DEFAULT_STATE_URL, "the built-in default (.elastico/state.db in the working directory)")
