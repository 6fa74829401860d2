"""The lowest floor: facts every package shares (cache folders, atomic files, units); imports no spectune code."""
