"""`python -m export`: how each spectune drafter maps to each production server, as docs/servers.md's Markdown rows."""

import sys

from export.table import markdown

if __name__ == "__main__":
    sys.stdout.write(markdown() + "\n")
