"""``python -m stochformer``: the command line."""

from .cli import main

main(prog_name="stochformer")
