"""Runners: one configuration over a suite, aggregation, logging; benchmarks."""
