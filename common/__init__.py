"""The lowest floor: facts every package shares (cache folders, atomic files, units, which errors are the user's);
imports no spectune code."""
