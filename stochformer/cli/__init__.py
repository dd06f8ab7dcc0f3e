"""The ``stochformer`` command line. Each command lives in its own module and is registered here."""

from __future__ import annotations

from typing import Any, Optional

import click

from ..core.version import __version__
from .bridge import bridge_cmd
from .chaos import chaos_cmd
from .converge import converge_cmd
from .pair import pair_cmd
from .phase import phase_cmd
from .rates import rates_cmd
from .reproduce import reproduce_cmd
from .simulate import simulate_cmd
from .spectrum import spectrum_cmd
from .common import GIVEN_ARGS, interrupted_exit, interrupts_never_lost
from .sweep import sweep_cmd
from .sync import sync_cmd


class _Commands(click.Group):
    """The group of commands; Ctrl-C while a command line is read or checked (before the command's
    own handler, which reports what was kept) exits like Ctrl-C during a run: one line, status 130;
    a Ctrl-C that lands in a finaliser is raised again rather than lost."""

    def make_context(self, info_name: Optional[str], args: list[str], parent: Optional[click.Context] = None,
                     **extra: Any) -> click.Context:
        given = list(args)  # before parsing consumes them: the command as typed, also from main(args) in Python
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta[GIVEN_ARGS] = given
        return ctx

    def invoke(self, ctx: click.Context) -> object:
        try:
            with interrupts_never_lost():
                return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # after a command's results are complete, it says so
            interrupted_exit(exc, ctx.meta.get("stochformer.kept") or "nothing was written")


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stochformer")
def main() -> None:
    """Deep transformers at random initialisation as interacting particle systems."""


for _command in (simulate_cmd, rates_cmd, pair_cmd, reproduce_cmd, sweep_cmd, sync_cmd, phase_cmd, converge_cmd, chaos_cmd,
                 bridge_cmd, spectrum_cmd):
    main.add_command(_command)
