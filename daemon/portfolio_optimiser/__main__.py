import sys

from portfolio_optimiser.cli import main

if __name__ == "__main__":  # a process spawned from this one imports it again (``FitProcess``)
    sys.exit(main())
