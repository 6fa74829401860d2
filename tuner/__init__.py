"""Optuna search over engine configurations and export of the best one. Arrives later."""
