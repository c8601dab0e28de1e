"""``elastico``: the command line. The only place where user strings become enums and paths."""

from __future__ import annotations

import sys

import click
import typer

from elastico_core.model.errors import ElasticoError

app = typer.Typer(
    name="elastico",
    help="Elastic configuration and interference-aware co-location for shared GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks of the hot paths (print JSON figures).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _register() -> None:
    from elastico_core.cli import iac, jobs, plan, profile, sim

    for module in (plan, iac, profile, sim, jobs):
        module.register(app, bench_app)


_register()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; validation errors print one line and exit 2, never a traceback."""
    try:
        app(args=argv, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ElasticoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1 if type(exc).__name__ == "StateUnavailable" else 2)  # not the input's fault: exit 1
    except KeyboardInterrupt:
        sys.exit(130)
