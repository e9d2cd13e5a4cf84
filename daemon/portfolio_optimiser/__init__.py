"""portfolio-optimiser: cost savings inside each project of a portfolio."""
