"""``python -m stochformer``: the command line."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="stochformer")
