import sys

from portfolio_optimiser.cli import main

sys.exit(main())
