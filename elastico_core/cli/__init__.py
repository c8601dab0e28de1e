"""``elastico``: the command line. The only place where user strings become enums and paths."""

from __future__ import annotations

import sys
from typing import Any

import click
import typer
from typer._click import exceptions as typer_click
from typer.core import TyperOption

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

_display_type_rich = TyperOption.display_type_rich


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """Typer 0.29 labels flags ``<bool>`` in --help, which invites ``--json true``: a flag takes no value."""
    return None if self.is_flag else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def _register() -> None:
    from elastico_core.cli import iac, jobs, loadtest, plan, profile, queues, sim

    for module in (plan, iac, profile, sim, jobs, queues, loadtest):
        module.register(app, bench_app)


_register()


def usage_line(exc: typer_click.ClickException | click.ClickException) -> str:
    """One line for a usage error: what was wrong, naming the option, and where help is."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"error: {exc.format_message()}{hint}"


def undecodable_line(exc: UnicodeDecodeError) -> str:
    """A file that is not UTF-8 text, when no reader named it (the spec readers do)."""
    return f"error: a file is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: a user's mistake prints one line on stderr and exits 2, never a traceback.

    Typer 0.29 raises its own copies of click's exceptions (``typer._click``), so both families are caught.
    """
    try:
        code = app(args=argv, prog_name="elastico", standalone_mode=False)
        if isinstance(code, int) and code:  # ``raise typer.Exit(1)`` comes back as a return value here
            sys.exit(code)
    except (click.exceptions.Exit, typer.Exit) as exc:
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, typer.Abort):
        sys.exit(130)
    except typer_click.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(2)
    except (typer_click.ClickException, click.ClickException) as exc:
        print(usage_line(exc), file=sys.stderr)
        sys.exit(2 if isinstance(exc, (typer_click.UsageError, click.UsageError)) else exc.exit_code)
    except ElasticoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)  # 2: the input's fault; 1 where it is not (``StateUnavailable``, a failed deployment)
    except UnicodeDecodeError as exc:
        print(undecodable_line(exc), file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
