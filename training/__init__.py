"""Rebuilds the bundled reference models (models/spectune-tiny): expert trajectories, tokenizer, target, draft.

Entry point: `python -m training.build` (see training/build.py). DESIGN.md §8 says what these
models are: suite-fitted, measuring fidelity, not skill.
"""
