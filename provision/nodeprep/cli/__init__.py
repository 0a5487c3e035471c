"""The ``nodeprep`` command line: thin click commands over the library."""

from __future__ import annotations

import logging

import click

from nodeprep import __version__
from nodeprep.cli.build_image import build_image
from nodeprep.cli.drill import drill_cmd
from nodeprep.cli.group import OneLineErrorGroup
from nodeprep.cli.job import run, status, stop
from nodeprep.cli.lab import lab
from nodeprep.cli.provision import provision
from nodeprep.cli.verify import verify


@click.group(cls=OneLineErrorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeprep")
@click.option("--debug", is_flag=True, help="Log library debug messages to stderr.")
def cli(debug: bool) -> None:
    """Harden Linux machines for long AI training runs, and prove the result.

    \b
    Examples:
      nodeprep provision inventory.ini
      nodeprep provision inventory.ini --limit gpu01 --check --diff
      nodeprep verify inventory.ini --junit verify.xml
      nodeprep build-image --wheelhouse ./wheels -o trainer.sif
      nodeprep run inventory.ini --name pretrain
      nodeprep status inventory.ini --name pretrain
      nodeprep drill inventory.ini --faults kill,netem
    """
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


cli.add_command(provision)
cli.add_command(lab)
cli.add_command(verify)
cli.add_command(build_image)
cli.add_command(run)
cli.add_command(status)
cli.add_command(stop)
cli.add_command(drill_cmd)


def main() -> None:
    cli(prog_name="nodeprep")
