"""Grading a patch with checks the tested code cannot reach (see tasks/evaluation.py for the whole design).

- `oracle.py` (host) splits each hidden test into a probe module and the checks only the host holds, and judges
  what the probes report.
- `observer.py` and `supervisor.py` run *inside* a sandbox and import nothing of spectune: their source is handed
  to the sandbox's interpreter. The supervisor runs as the sandbox's trusted user, starts the probe runner
  (observer.py) as the unprivileged one, and reports its records.
- `verdict.py` (host) reads the supervisor's line and decides.
"""
