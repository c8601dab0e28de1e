"""The second probe's repros on the Airflow side: secrets in every spelling a driver accepts, the allow-list's
trailing newline and unbounded sizes, and run-conf labels over the connection's."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

SECRET = "S3cret"


# ---- 5. secrets in every spelling ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg2://u@h:5432/db?pass%77ord={SECRET}",  # SQLAlchemy decodes the key to "password"
        f"postgresql+psycopg2://u@h:5432/db?%70assword={SECRET}",
        f"postgresql://u@h/db?pass%2577ord={SECRET}",  # encoded twice over
        f"host=h dbname=d password = {SECRET}",  # libpq: spaces around '='
        f"host=h dbname=d password='{SECRET} x' user=u",  # libpq: a quoted value with a space
        f"postgresql://u@h/db?password=sec;{SECRET}&sslmode=require",  # ';' is no separator: used to leave "ret"
        f"postgresql:/u:{SECRET}@h/db",  # a typo: one slash
        f"postgresql://u:p@s{SECRET}@h/db",  # '@' inside the password
    ],
)
def test_every_spelling_of_a_password_is_redacted(url: str) -> None:
    from elastico_airflow.settings import has_password, redact_url
    from elastico_core.state.url import redacted

    assert has_password(url)
    assert SECRET not in redact_url(url) and SECRET not in redacted(url), redact_url(url)


@pytest.mark.parametrize("url", [f"postgresql:/u:{SECRET}@h/db", f"host=h password={SECRET}", f"postgresql//u:{SECRET}@h/db"])
def test_a_url_the_parser_rejects_is_never_shown_nor_taken_as_a_file(url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``postgresql:/u:secret@…`` was silently a SQLite file named after it, and the password was echoed."""
    from elastico_airflow.settings import ConnectionFields, SettingsError, resolve_settings
    from tests.cli_runner import run_cli

    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "state", "upgrade", "--state", url)
    assert code == 2 and SECRET not in out + err and err.count("\n") == 1 and "not a database URL" in err
    assert not any(tmp_path.rglob("*")), "nothing may be created from a rejected URL"
    with pytest.raises(SettingsError) as info:
        resolve_settings(ConnectionFields(extra={"state_url": url}), {})
    assert SECRET not in str(info.value) and "not a database URL" in str(info.value)


def test_the_local_launcher_never_gets_a_url_with_a_percent_encoded_password() -> None:
    from elastico_airflow.settings import ConnectionFields, resolve_settings

    settings = resolve_settings(ConnectionFields(extra={"state_url": f"postgresql://u@h/db?pass%77ord={SECRET}"}), {})
    assert SECRET not in settings.state_url_redacted
    from elastico_airflow.settings import has_password

    assert has_password(settings.state_url)  # the operator passes only URLs without a secret to local workloads


# ---- 7. the allow-list ----------------------------------------------------------------------------------
TRAILING_NEWLINE: list[dict[str, Any]] = [
    {"labels": {"team\n": "a"}},
    {"labels": {"team": "a\n"}},
    {"env": {"APP_X\n": "1"}},
    {"cpu": "2\n"},
    {"memory": "8Gi\n"},
    {"annotations": {"note\n": "x"}},
]


@pytest.mark.parametrize("raw", TRAILING_NEWLINE, ids=[repr(r) for r in TRAILING_NEWLINE])
def test_a_trailing_newline_is_refused_by_both_layers(raw: dict[str, Any]) -> None:
    """Python's ``$`` (and so jsonschema's ``pattern``) matches before a final newline: all of these passed."""
    from elastico_airflow.allowlist import PodOverrideError, check_pod_overrides, pod_overrides_schema

    with pytest.raises(PodOverrideError) as info:  # one line, never a plain ValueError ("8Gi\n" raised one)
        check_pod_overrides(raw)
    assert "\n" not in str(info.value).strip() or "\\n" in str(info.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, pod_overrides_schema())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"env": {"APP_BIG": "x" * 50_000_000}}, "longer than"),
        ({"env": {f"APP_{i}": "1" for i in range(100_000)}}, "entries"),
        ({"env": {"APP_NUL": "a\x00b"}}, "NUL"),
        ({"annotations": {"note": "a\x00b"}}, "NUL"),
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "entries"),
        ({"cpu": True}, "must be a string"),
        ({"memory": "9" * 40 + "Gi"}, "not a memory quantity"),
    ],
    ids=["50 MB value", "100k names", "NUL in env", "NUL in annotation", "65 labels", "boolean cpu", "40-digit memory"],
)
def test_sizes_and_counts_are_bounded(raw: dict[str, Any], message: str) -> None:
    from elastico_airflow.allowlist import PodOverrideError, check_pod_overrides

    with pytest.raises(PodOverrideError, match=message) as info:
        check_pod_overrides(raw)
    assert len(str(info.value)) < 300  # the value is named by its size, not printed


def test_run_conf_labels_never_overwrite_the_connections() -> None:
    from elastico_airflow.allowlist import PodOverrideError, check_pod_overrides
    from elastico_airflow.settings import ConnectionFields, resolve_settings

    settings = resolve_settings(ConnectionFields(extra={"labels": {"team": "platform", "cost-center": "42"}}), {})
    with pytest.raises(PodOverrideError, match="set by the platform"):
        check_pod_overrides({"labels": {"cost-center": "0"}}, settings.override_policy)
    assert check_pod_overrides({"labels": {"mine": "x"}}, settings.override_policy).labels == (("mine", "x"),)
