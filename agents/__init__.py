"""The multi-turn coding agent (prompting, action parsing, the loop). Arrives with issue 4."""
