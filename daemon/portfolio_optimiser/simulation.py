"""``python -m portfolio_optimiser.simulation``: the same as ``portfolio-optimiser demo`` (see
:mod:`portfolio_optimiser.daemon.demo`), under the name the design has always given it."""

import sys

from portfolio_optimiser.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["demo", *sys.argv[1:]]))
