"""The CLI's error types and exit codes (see ARCHITECTURE.md, "Contracts between the parts")."""

from __future__ import annotations

import click

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3


class BadInput(click.ClickException):
    """Input nodeprep refuses before anything runs: one sentence, exit 2."""

    exit_code = EXIT_BAD_INPUT

    def show(self, file: object = None) -> None:
        click.echo(f"nodeprep: error: {self.format_message()}", err=True)
