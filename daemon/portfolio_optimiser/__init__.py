"""portfolio-optimiser: cost savings inside each project of a portfolio."""

import os

# numpy asks the kernel for huge pages for every large array (madvise). Where the kernel then
# compacts memory to find them at the first touch (defrag=madvise, Debian's default), a fit that
# allocates and frees hundreds of megabytes at each event stalls on it: one more project at
# 10 000 took 1.7–1.9 s with them, 1.4 s without. Read when numpy is first imported; a value
# the user set is kept.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
