"""Grading a patch without trusting the process that runs its code (see tasks/evaluation.py for the whole design).

- `supervisor.py` and `boot.py` run *inside* a sandbox and import nothing of spectune: their source is handed to
  the sandbox's interpreter. The supervisor runs as the sandbox's trusted user and starts the tests as the
  unprivileged one; boot.py is the tests' interpreter start (audit hook, the reporting plugin, integrity checks).
- `sentinels.py` plants canary tests only the grader knows the expected outcomes of.
- `verdict.py` reads what the supervisor reported and decides, on the host.
"""
