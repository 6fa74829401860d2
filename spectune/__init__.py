"""spectune's umbrella: the `spectune` command (spectune/cli.py), one name over the packages' `python -m` entries."""
