"""The multi-turn coding agent: prompting, action parsing, safe edits and the loop (agents/loop.py)."""
