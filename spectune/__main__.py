"""`python -m spectune ...`: the same as the `spectune` console script."""

import sys

from spectune.cli import main

if __name__ == "__main__":
    sys.exit(main())
