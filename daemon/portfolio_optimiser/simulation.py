"""``python -m portfolio_optimiser.simulation``: the offline two-run simulation (see
:mod:`portfolio_optimiser.pipeline.simulation`)."""

from portfolio_optimiser.pipeline.simulation import main

if __name__ == "__main__":
    raise SystemExit(main())
