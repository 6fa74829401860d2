"""Speculative-decoding engine: drafters, acceptance rules, model loading and the decode loop."""
