"""The grading supervisor: runs inside a sandbox as its trusted user, runs the tests as the unprivileged one.

Its source is handed to the sandbox's interpreter (`python -I -c`); it imports only the standard library.
The sandbox passes, in the environment (readable by this process only):
- SPECTUNE_CHILD_PREFIX: JSON argv that runs a program as the unprivileged command user with the command limits
  (prlimit, setpriv ...);
- SPECTUNE_GRADER_JOB: JSON {"argv": the test program, "env": its environment, "timeout": seconds,
  "kill_leftovers": whether this sandbox has its own PID namespace}.

The tests get a pipe for their output (never this process's stdout) and a pipe at fd 3 for the reports of the
probe runner (observer.py). When the test process ends, every other process of the command user is killed (with a
PID namespace), both pipes are drained, and one line goes to stdout: `SPECTUNE-VERDICT <base64 of gzipped JSON>`
with the test process's exit status or signal, whether it timed out, every report line, and the tail of its
output. Only this process writes to the sandbox's output, and the code under test cannot reach it: it runs as
another user, so it cannot signal this process, read its memory or descriptors, or write into its stdout.
"""

import base64
import gzip
import json
import os
import select
import signal
import sys
import time

REPORT_FD = 3  # where observer.py writes its records, in the test process
LOG_TAIL = 4000  # bytes of the tests' own output kept (messages only; nothing is decided on it)
REPORTS_LIMIT = 8 * 2**20  # bytes of report lines kept
OUTPUT_BUDGET = 48 * 1024  # characters of the verdict line: under the sandbox's output cap (DEFAULT_OUTPUT_LIMIT)


def run() -> dict:
    """Run the job; the verdict."""
    prefix = json.loads(os.environ["SPECTUNE_CHILD_PREFIX"])
    job = json.loads(os.environ["SPECTUNE_GRADER_JOB"])
    deadline = time.monotonic() + float(job["timeout"])
    report_r, report_w = os.pipe()
    log_r, log_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own session, fd 3 the report pipe, output to the log pipe
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_w, 1)
            os.dup2(log_w, 2)
            os.dup2(report_w, REPORT_FD)
            os.closerange(REPORT_FD + 1, 65536)
            os.execvpe(prefix[0], [*prefix, *job["argv"]], job["env"])
        finally:
            os._exit(127)
    os.close(report_w)
    os.close(log_w)
    reports, log = bytearray(), bytearray()
    open_fds = {report_r: reports, log_r: log}
    status, timed_out, cleaned, leftovers = None, False, False, False
    while True:
        if time.monotonic() >= deadline:
            timed_out = True
            break
        if status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = raw
        if status is not None and not cleaned:
            # the test process is gone: whatever else of the command user still runs (and may hold its pipes) is
            # a leftover, and nothing may write a report after the tests ended
            leftovers = _still_open(open_fds)
            kill_leftovers(prefix, job)
            cleaned = True
        if status is not None and not open_fds:
            break
        if not open_fds:
            time.sleep(0.02)
            continue
        ready, _, _ = select.select(list(open_fds), [], [], min(max(deadline - time.monotonic(), 0), 0.2))
        for fd in ready:
            data = os.read(fd, 1 << 16)
            if not data:
                del open_fds[fd]
            else:
                _keep(open_fds[fd], data, fd == log_r)
    if status is None:  # timed out: the whole test process group, then every leftover
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        kill_leftovers(prefix, job)
        _, status = os.waitpid(pid, 0)
    for fd, buffer in open_fds.items():  # the writers are gone now: read what is left, briefly
        while select.select([fd], [], [], 1.0)[0]:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            _keep(buffer, data, fd == log_r)
    lines = reports.decode("utf-8", errors="replace").splitlines()
    return {
        "exit_status": os.waitstatus_to_exitcode(status) if status is not None else None,
        "timed_out": timed_out,
        "leftovers": leftovers,
        "reports": lines,
        "reports_truncated": len(reports) >= REPORTS_LIMIT,
        "log_tail": log[-LOG_TAIL:].decode("utf-8", errors="replace"),
    }


def _still_open(fds: dict) -> bool:
    """Whether a pipe's write end is still held by someone (nothing to read yet and no end of file)."""
    for fd in list(fds):
        if select.select([fd], [], [], 0.05)[0]:
            continue  # data or end of file: the loop reads it
        return True
    return False


def _keep(buffer: bytearray, data: bytes, tail_only: bool) -> None:
    """Append `data`: the log keeps its last LOG_TAIL bytes, the reports their first REPORTS_LIMIT."""
    if tail_only:
        buffer.extend(data)
        del buffer[: max(0, len(buffer) - LOG_TAIL)]
    elif len(buffer) < REPORTS_LIMIT:
        buffer.extend(data[: REPORTS_LIMIT - len(buffer)])


def kill_leftovers(prefix: list, job: dict) -> None:
    """SIGKILL every process of the command user (with a PID namespace only: elsewhere that is the host's)."""
    if not job.get("kill_leftovers"):
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.execvpe(prefix[0], [*prefix, "kill", "-KILL", "-1"], {"PATH": "/usr/bin:/bin"})
        finally:
            os._exit(127)
    os.waitpid(pid, 0)


def main() -> int:
    """Run, print the verdict line, exit 0 (any other status means the supervisor itself failed)."""
    verdict = run()
    blob = base64.b64encode(gzip.compress(json.dumps(verdict).encode())).decode()
    if len(blob) > OUTPUT_BUDGET:  # a flood of records: say so rather than let the sandbox cut the line
        verdict.update(reports=[], reports_truncated=True)
        blob = base64.b64encode(gzip.compress(json.dumps(verdict).encode())).decode()
    sys.stdout.write(f"SPECTUNE-VERDICT {blob}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
