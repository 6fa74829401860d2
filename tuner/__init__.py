"""The Optuna tuner: python -m tuner.search (search, space, objective, constraints, study, confirmation, export)."""
