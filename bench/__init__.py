"""Benchmarks (`python -m bench engine|crossengine|tuner`): measurements side by side in one run, never tests.

The top floor: a benchmark may import any package below it (engine, serving, agents, runners, tuner);
nothing imports a benchmark.
"""
