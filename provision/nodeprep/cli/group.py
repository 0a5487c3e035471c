"""The command group that prints every refusal as one line, click's own included.

click reports its own parse errors (a bad ``--forks``, an unknown option, a
missing argument) as three lines, Usage/Try/Error, while nodeprep's refusals are
one sentence. This group runs click in non-standalone mode and prints both the
same way, with the exit codes of ``cli/errors.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from nodeprep.cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, BadInput


class OneLineErrorGroup(click.Group):
    """A click group whose usage errors read like nodeprep's own: one line, exit 2."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            _refuse(usage_sentence(exc))
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("nodeprep: aborted.", err=True)
            sys.exit(EXIT_FAILED)
        sys.exit(result if isinstance(result, int) else 0)


def usage_sentence(exc: click.UsageError) -> str:
    """click's message, without its prefix where nodeprep's own type already names the option."""
    message = exc.format_message().strip()
    if isinstance(exc, click.BadParameter) and exc.param is not None:
        own = str(exc.message)
        if any(own.startswith(f"{opt} ") for opt in exc.param.opts):
            message = own
    command = exc.ctx.command_path if exc.ctx is not None else "nodeprep"
    return f"{message.rstrip('.')} (see '{command} --help')."


def _refuse(sentence: str) -> NoReturn:
    BadInput(sentence).show()
    sys.exit(EXIT_BAD_INPUT)
