"""LocalSandbox: run an agent's shell commands on this machine, in Linux namespaces, as `nobody`.

A command sees only what it is given, never the host minus a list of hidden places. Each command starts, through
bubblewrap (`bwrap`, Debian package `bubblewrap`), in a fresh empty root holding exactly (local_mounts.py):

    /workspace                          the workspace, read-write (a size-capped tmpfs as root)
    /usr, /bin, /sbin, /lib, /lib64...  the host's, read-only (symlinks into /usr where the host has them)
    /etc                                passwd, group, hosts, nsswitch.conf written for the sandbox; the host's
                                        ld.so.cache and alternatives, read-only; nothing else
    /proc, /dev                         the command's own procfs; null, zero, full, random, urandom, tty, private pts
    /tmp, /var/tmp, /dev/shm, /run      fresh private size-capped tmpfs, empty, gone with the command
    the task interpreter's paths        read-only at their own host paths (the task environment of
                                        tasks/sandbox/task_python.py and its base Python, `expose_paths`), the
                                        folders on the way to them empty

and its root is read-only. Nothing else of the host exists inside: no other clone of this project, no /home, /root
(but the way to the task Python), /opt, /srv, /mnt, /var/lib, /sys.

What it protects against -- accidents and careless or greedy code, which is what a coding agent produces: reading
the host (task data, gold patches and hidden tests of any checkout, anyone's home); runaway processes and fork loops
(a pids cgroup and RLIMIT_NPROC cap the number of processes; the whole tree, including processes that `setsid` or
double-fork, dies at the timeout and whenever the command ends, because it lives in its own PID namespace, and when
the runner dies, even by SIGKILL, through a parent-death signal); memory and disk hogs (a memory cgroup caps
the whole command tree, the workspace is a size-capped tmpfs, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CPU, RLIMIT_NOFILE,
size-capped private tmpfs); output floods (only the first and last halves of DEFAULT_OUTPUT_LIMIT bytes are kept,
the pipe is always drained); writes outside the workspace (commands run as an unprivileged user with no capabilities
and no_new_privs in a read-only root, so host service sockets under /run are out of reach); network access (a fresh
network namespace with only its own loopback: no route to the host's 127.0.0.1 or anywhere else); and secret
leakage (the environment is rebuilt from a fixed list, no variable of the caller passes through; `python` is the
task environment, not the runner's venv).

What it does NOT protect against: a determined attacker. It shares the host kernel, so a kernel exploit escapes it;
the host's /usr stays readable; the CPU and the page cache are shared, so one command can slow others; RLIMIT_NPROC
counts all processes of the unprivileged user on the machine. It is not a security boundary -- use a VM for that.

How a command runs (`isolation="namespaces"`, chosen automatically when the caller is root):

    setpriv --pdeathsig KILL
      sh -c '[ "$PPID" = <runner> ] && echo 0 > <pids and memory cgroup>/cgroup.procs && exec "$@"'
        unshare --pid --fork --kill-child       (its child: PID 1 of an outer PID namespace, parent-death signal)
          bwrap --unshare-{pid,net,ipc,uts,cgroup} --die-with-parent --hostname sandbox <the root above>
            prlimit ... -- setpriv --reuid=nobody ... --no-new-privs --bounding-set=-all --
              bash -c COMMAND   (cwd /workspace, stdout and stderr on one pipe, stdin /dev/null, umask 022)

bwrap runs as root of the new namespaces (its PID 1 is a reaper): when the command ends the reaper exits and the
kernel kills everything else in the namespace, so a command never leaves processes behind; on timeout the sandbox
SIGKILLs the process group and everything in the command's cgroup. The runner's death reaches the command in one
step at every moment: setpriv's parent-death signal kills the chain, the shell refuses to go on if the runner died
before that was set, and unshare's child sets its own signal at once; as PID 1 of the outer namespace its death
kills everything nested in it (bwrap's own PID 1 sets its signal only after the whole set-up). Whether the command
started at all comes from bwrap's --json-status-fd (it reports an "exit-code" only for a command it executed), so a
set-up failure is a SandboxError, never a command's output. A non-root caller gets the same through a user
namespace (`unshare --user --map-root-user`: root inside, the caller outside), minus the separate user, the
workspace size cap and, mostly, the cgroups (see `warnings`).
Without bwrap, or where no namespace can be made, `isolation="none"` (or "auto" falling back) runs a plain process
group with the same rlimits and environment and lists every protection it lacks in `warnings`; under CI=true a
sandbox without network isolation refuses to start.

Observations are deterministic: the workspace is always at /workspace, /tmp is empty (but for the read-only way to a
Python that lies below it), the hostname is fixed, PYTHONHASHSEED=0, no pytest cache, and pytest's session timing is
stripped from its summary line (`normalize_output`). The baseline and `diff()` live in a git directory outside the
workspace that the command cannot see (the workspace also gets its own `.git` with the same baseline commit, for the
agent's `git diff`/`git status`). The host temp dir and the cgroups carry the runner's owner token
(tasks/sandbox/owner.py): those of a runner that died are removed by the next sandbox made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pwd
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from tasks.sandbox.base import DEFAULT_TIMEOUT_S, DIFF_LIMIT, WORKSPACE, CommandResult, PatchTooLargeError, SandboxError
from tasks.sandbox.limits import Limits, OutputCapture, parse_size, setpriv_args
from tasks.sandbox.local_cgroup import CommandCgroups, reap_stale_cgroups
from tasks.sandbox.local_mounts import TMPFS_DIRS, blocked_at, bwrap_mounts, plan_exposed, write_etc
from tasks.sandbox.owner import mark, reap_stale_dirs
from tasks.sandbox.task_python import TaskPython, note_private_tmpfs, task_python
from tasks.sandbox.workspace import (
    BASELINE_ATTRIBUTES,
    DIFF_FLAGS,
    GIT_CONFIG,
    SBIN_PATH,
    command_env,
    git_env,
    normalize_output,
)

ISOLATION_MODES = ("auto", "namespaces", "none")
PYTHON_ENVS = ("task", "runner")
HOSTNAME = "sandbox"
READY = b"SPECTUNE-SANDBOX-READY"  # isolation="none": the cgroups are joined, the command starts now
BWRAP_STARTED = b'"exit-code"'  # bwrap's --json-status-fd says so only for a command it executed
INSTALL_BWRAP = "install bubblewrap (apt-get install bubblewrap)"

# ------------------------------------------------------------------------------------------------
# host helpers


def _which(name: str, path: str = SBIN_PATH) -> str | None:
    return shutil.which(name, path=path)


def _need(name: str) -> str:
    found = _which(name)
    if found is None:
        raise SandboxError(f"`{name}` not found in {SBIN_PATH}; install util-linux/git (apt-get install ...)")
    return found


@functools.lru_cache(maxsize=8)
def _probe(argv: tuple[str, ...]) -> str | None:
    """Run a namespace probe once per process; None if it worked, else why not."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=20, env={"PATH": SBIN_PATH}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode != 0:
        return proc.stderr.decode(errors="replace").strip() or f"exit status {proc.returncode}"
    return None


def _rmtree(path: Path) -> None:
    def onerror(func: Any, p: str, exc: Any) -> None:  # a read-only dir made by the command
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)

    if path.exists():
        shutil.rmtree(path, onerror=onerror)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


@dataclass
class _Resources:
    """What close() (or the garbage collector, via weakref.finalize) must release."""

    host_root: Path | None = None
    workspace_mount: Path | None = None  # the size-capped tmpfs holding the workspace, if any
    cgroup: CommandCgroups | None = None
    procs: set[subprocess.Popen[bytes]] = field(default_factory=set)


def _release(res: _Resources) -> None:
    for proc in list(res.procs):
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        res.procs.discard(proc)
    if res.cgroup is not None:
        res.cgroup.close()
        res.cgroup = None
    if res.workspace_mount is not None:
        subprocess.run(["umount", "-l", str(res.workspace_mount)], capture_output=True, check=False)
        res.workspace_mount = None
    if res.host_root is not None:
        _rmtree(res.host_root)
        res.host_root = None


_REAPED: set[str] = set()


def _reap_once(base_dir: str | Path | None) -> None:
    """Remove, once per process and folder, what sandboxes of dead runners left (temp folders, cgroups)."""
    key = str(base_dir or tempfile.gettempdir())
    if key in _REAPED:
        return
    _REAPED.add(key)
    reap_stale_dirs(base_dir)
    if os.geteuid() == 0:
        reap_stale_cgroups()


# ------------------------------------------------------------------------------------------------


class LocalSandbox:
    """One workspace on this machine; see the module docstring for what it does and does not stop.

    Options (all keyword-only):
      user: who runs commands when the caller is root: a user name or uid (default "nobody");
        the group is that user's primary group, supplementary groups are cleared.
      isolation: "auto" (namespaces if possible, else the plain fallback with warnings),
        "namespaces" (raise SandboxError if they cannot be made) or "none" (force the fallback).
      limits: a `Limits`; any of its fields may also be given directly (max_processes=64,
        output_limit=..., address_space=None, ...).
      expose_paths: extra host paths commands may read, bound read-only at their own paths (the
        interpreter's own paths are exposed automatically); nothing else of the host is visible.
      base_dir: where the host temp dir is made (default: tempfile's default, e.g. /tmp).
      use_cgroup: False skips the cgroups (RLIMIT_NPROC still applies; no total memory cap).
      python_env: "task" (default: `python` is the task environment, pytest and nothing of
        spectune's; see tasks/sandbox/task_python.py) or "runner" (the running interpreter's own
        environment, every package and pytest plugin of it; for tasks that need them).

    Attributes: `network_isolated` (bool), `isolation` (the mode in use: "namespaces",
    "userns" or "none"), `warnings` (list of str: every protection that is missing here),
    `host_path` (the workspace on the host, after start()).
    """

    name = "local"

    def __init__(
        self,
        *,
        user: str | int = "nobody",
        isolation: str = "auto",
        limits: Limits | None = None,
        expose_paths: list[str] | tuple[str, ...] = (),
        base_dir: str | Path | None = None,
        use_cgroup: bool = True,
        python_env: str = "task",
        **limit_overrides: Any,
    ) -> None:
        if isolation not in ISOLATION_MODES:
            raise ConfigError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        if python_env not in PYTHON_ENVS:
            raise ConfigError(f"python_env must be one of {PYTHON_ENVS}, got {python_env!r}")
        _reap_once(base_dir)
        self.python_env = python_env
        env = self._choose_python(python_env)
        fields = {f.name for f in dataclasses.fields(Limits)}
        unknown = set(limit_overrides) - fields
        if unknown:
            raise TypeError(f"unknown LocalSandbox option(s): {sorted(unknown)}; limits are {sorted(fields)}")
        self.limits = dataclasses.replace(limits or Limits(), **limit_overrides)
        self.warnings: list[str] = []
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self._expose = tuple(expose_paths)
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, _release, self._res)
        self._closed = False
        self._started = False
        self._counter = 0
        self._baseline = ""
        self._bwrap_argv: list[str] = []
        self.host_path: Path | None = None

        self._find_tools()
        self._choose_user(user)
        why_not = self._choose_isolation(isolation)
        self._plan_exposure(why_not, env)
        if self.limits.workspace_size is not None and self.isolation != "namespaces":
            self.warnings.append(
                "no workspace size cap (needs root and namespaces): RLIMIT_FSIZE caps single files only"
            )
        # the cgroups last: nothing after them may fail and leave them behind until the finalizer
        self._make_cgroups(use_cgroup)

    def _choose_python(self, python_env: str) -> TaskPython | None:
        """The `python` of commands (class docstring: python_env): its bin folder and the host paths it needs; the task
        environment itself when it is one."""
        if python_env == "task":
            env = task_python()
            self._python_bindir, self._python_paths = str(env.bindir), env.needed_paths()
            return env
        self._python_bindir = os.path.dirname(os.path.abspath(sys.executable))
        self._python_paths = [
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            sys.base_exec_prefix,
            self._python_bindir,
            os.path.dirname(os.path.realpath(sys.executable)),
        ]
        return None

    def _find_tools(self) -> None:
        """The host programs a command needs (a missing one is a SandboxError) or may use."""
        self._bash = _need("bash")
        self._sh = _need("sh")
        self._git_exe = _need("git")
        self._prlimit = _need("prlimit")
        self._setpriv = _which("setpriv")
        self._mount = _which("mount")
        self._bwrap = _which("bwrap")
        self._unshare = _which("unshare")

    def _choose_user(self, user: str | int) -> None:
        """Who runs commands: `user` when the caller is root (an unprivileged one), else the caller, with a warning."""
        self._root = os.geteuid() == 0
        if self._root:
            try:
                pw = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user)
            except KeyError:
                raise SandboxError(
                    f"user {user!r} does not exist; pass user=<name or uid> of an unprivileged user"
                ) from None
            self.uid, self.gid = pw.pw_uid, pw.pw_gid
            if self.uid == 0:
                raise SandboxError("user must be unprivileged (uid != 0): commands would run as root")
            if self._setpriv is None:
                raise SandboxError("`setpriv` (util-linux) is needed to drop privileges; apt-get install util-linux")
        else:
            self.uid, self.gid = os.getuid(), os.getgid()
            if user not in ("nobody", self.uid):
                self.warnings.append(f"not root: commands run as the caller (uid {self.uid}), not as {user!r}")

    def _choose_isolation(self, isolation: str) -> str:
        """Which isolation works here (`self.isolation`); returns why namespaces are not used ("" when they are)."""
        self.isolation = "none"
        why_not = "forced by isolation='none'"
        if isolation != "none":
            if self._bwrap is None:
                why_not = f"`bwrap` not found in {SBIN_PATH}: {INSTALL_BWRAP}"
            elif self._unshare is None:
                why_not = f"`unshare` not found in {SBIN_PATH}: install util-linux (apt-get install util-linux)"
            else:
                # the options every command uses, so a bwrap too old for --size or --perms fails here
                probe = ("--ro-bind", "/", "/", "--perms", "1777", "--size", "65536", "--tmpfs", "/tmp", "true")
                why_not = _probe((*self._ns_argv(userns=not self._root), *probe)) or ""
                if not why_not:
                    self.isolation = "namespaces" if self._root else "userns"
            if self.isolation == "none" and isolation == "namespaces":
                raise SandboxError(
                    f"namespaces unavailable: {why_not}. Run as root, enable user namespaces "
                    "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces), or pass isolation='none'"
                )
        self.network_isolated = self.isolation != "none"
        if os.environ.get("CI", "").lower() == "true" and not self.network_isolated:
            raise SandboxError(
                f"CI=true requires network isolation, but bwrap cannot make namespaces here ({why_not}); "
                f"{INSTALL_BWRAP} and run the tests as root or where user namespaces are allowed"
            )
        return why_not

    def _plan_exposure(self, why_not: str, env: TaskPython | None) -> None:
        """What of the host commands see (`self._exposed`: the python's paths and expose_paths, read-only), and the
        warnings for what is not protected here."""
        needed = {os.path.realpath(p) for p in self._python_paths if p and os.path.exists(p)}
        needed |= {os.path.realpath(p) for p in self._expose}  # a missing one is warned about
        if self.isolation == "none":
            self.warnings += [
                f"no namespaces ({why_not}): the network is NOT isolated",
                "no mount namespace: commands see the real host filesystem (everything the user may read), /tmp is "
                "the host's, and they run in the host temp dir, not at /workspace (paths in output vary)",
                "no PID namespace: a process that leaves the command's process group survives the "
                "timeout unless the pids cgroup catches it",
            ]
            if not self._root:
                self.warnings.append("not root: commands run as the caller and can write wherever the caller can")
            for p in sorted(needed):
                if blocked_at(p, self.uid, self.gid):
                    self.warnings.append(f"{p} is not readable by uid {self.uid}: `python` may not run in commands")
            self._exposed: list[str] = []
        else:
            if self.isolation == "userns":
                self.warnings.append(
                    f"user namespace without root: commands run as its root, which is the caller (uid {self.uid}) "
                    "on the host, without capabilities, not as a separate user"
                )
            self._exposed = plan_exposed(needed, self.uid, self.gid, self.warnings)
            if env is not None:
                note_private_tmpfs(env, TMPFS_DIRS)

    def _make_cgroups(self, use_cgroup: bool) -> None:
        """The command cgroups (pids, and memory when limited), or the warnings for what is missing without them."""
        if use_cgroup:
            memory = self.limits.memory is not None
            self._res.cgroup, how = CommandCgroups.create(memory=memory)
            if self._res.cgroup is None and memory:  # a pids cap alone is still worth having
                self._res.cgroup, more = CommandCgroups.create(memory=False)
                how = f"{more}; no memory cgroup ({how}): no total memory cap, RLIMIT_AS per process only"
                self.warnings.append(how)
            self.cgroup_info = how
            if self._res.cgroup is None:
                self.warnings.append(
                    f"no cgroups ({how}): the process cap is RLIMIT_NPROC only, which counts "
                    f"every process of uid {self.uid} on this machine, and there is no total memory cap"
                )
        else:
            self.cgroup_info = "disabled (use_cgroup=False)"
            self.warnings.append("cgroups disabled: the process cap is RLIMIT_NPROC only, no total memory cap")

    def _ns_argv(self, userns: bool) -> list[str]:
        """unshare and bwrap with their namespaces, up to bwrap's mounts.

        bwrap alone would leave a gap: its PID 1 sets its parent-death signal only after the whole set-up, so a
        runner dying meanwhile would leave the command running. unshare's child sets it at once, and as PID 1 of
        the outer PID namespace its death kills everything in bwrap's namespace nested in it. As root there is no
        user namespace: the command user must be a real, other uid.
        """
        user = ["--user", "--map-root-user"] if userns else []
        return [
            self._unshare or "unshare",
            *user,
            "--pid",
            "--fork",
            "--kill-child",
            self._bwrap or "bwrap",
            "--unshare-pid",
            "--unshare-net",  # bwrap brings up the namespace's own loopback
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",  # /proc/self/cgroup shows "/", not the host's cgroup path
            "--die-with-parent",
            "--hostname",
            HOSTNAME,
        ]

    # -- Sandbox protocol ------------------------------------------------------------------------

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, source: Path | str) -> None:
        """Copy `source` (without any .git) into a fresh host temp dir and commit it as the baseline."""
        if self._closed:
            raise SandboxError("sandbox is closed; make a new one")
        if self._started:
            raise SandboxError("sandbox already started; make a new one per workspace")
        source = Path(source)
        if not source.is_dir():
            raise SandboxError(f"source {source} is not a directory")
        root = Path(tempfile.mkdtemp(prefix="spectune-local-", dir=self._base_dir))
        self._res.host_root = root
        mark(root)  # a runner killed before close(): the next sandbox's reaper removes this folder
        # the plain fallback runs commands in the host dir itself: the user must be able to reach it
        os.chmod(root, 0o711 if self.isolation == "none" else 0o700)
        ws = root / "workspace"
        if self.limits.workspace_size is not None and self.isolation == "namespaces":
            # the workspace is a size-capped tmpfs: a command cannot fill the host's disk through it
            ws.mkdir()
            mounted = subprocess.run(
                [
                    self._mount or "mount",
                    "-t",
                    "tmpfs",
                    "-o",
                    f"size={self.limits.workspace_size},mode=0700",
                    "spectune-workspace",
                    str(ws),
                ],
                capture_output=True,
                check=False,
            )
            if mounted.returncode != 0:
                raise SandboxError(f"cannot mount the workspace tmpfs on {ws}: {mounted.stderr.decode().strip()}")
            self._res.workspace_mount = ws
        try:
            shutil.copytree(source, ws, symlinks=True, ignore=shutil.ignore_patterns(".git"), dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:
            raise SandboxError(f"cannot copy {source} into the sandbox: {exc}") from exc
        self.host_path = ws
        self._git_dir = root / "baseline.git"
        # the command's own repository (for `git diff` inside) and the sandbox's, out of reach
        self._git(["init", "-q", "--template="], cwd=ws, git_dir=None)
        self._git(["add", "-A"], cwd=ws, git_dir=None)
        self._git(["commit", "-q", "--no-verify", "--allow-empty", "-m", "baseline"], cwd=ws, git_dir=None)
        self._git(["init", "-q", "--template="])
        (self._git_dir / "info").mkdir(exist_ok=True)
        (self._git_dir / "info" / "attributes").write_text(BASELINE_ATTRIBUTES + "\n")  # see BASELINE_ATTRIBUTES
        self._git(["add", "-A"])
        self._git(["commit", "-q", "--no-verify", "--allow-empty", "-m", "baseline"])
        self._baseline = self._git(["rev-parse", "HEAD"]).strip()
        if self._root and self.uid != 0:
            subprocess.run(["chown", "-R", "-h", f"{self.uid}:{self.gid}", str(ws)], check=True)
        if self.isolation != "none":
            write_etc(root / "etc", self.uid, self.gid, HOSTNAME)
            mounts = bwrap_mounts(ws, root / "etc", self._exposed, parse_size(self.limits.tmpfs_size))
            userns = self.isolation == "userns"
            self._bwrap_argv = [*self._ns_argv(userns), *mounts, "--chdir", WORKSPACE]
        self._started = True

    def run(self, command: str, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        """Run `bash -c command` in the workspace; see the module docstring for how."""
        if "\0" in command:  # cannot be passed to bash at all: the command's own error, not the sandbox's
            self._check_run(timeout)
            return CommandResult(returncode=2, output="sandbox: the command contains a NUL byte\n")
        return self._execute(command, timeout, trusted=None)

    @property
    def separates_trusted(self) -> bool:
        """`run_trusted`'s program runs as another user than the commands it starts (root and namespaces)."""
        return self.isolation == "namespaces"

    def run_trusted(self, program: str, job: dict[str, Any], timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        """Run the Python `program` (source, run with `python -I -c`) in the workspace as the sandbox's *trusted* user.

        It gets `SPECTUNE_CHILD_PREFIX` (JSON argv that runs a program as the command user under the command
        limits) and `SPECTUNE_GRADER_JOB` (JSON `job`, plus the command environment as `env` and whether leftovers
        may be killed with `kill -1`) in its environment, and starts the untrusted part itself (see
        tasks/grading/supervisor.py). As root with namespaces the trusted user is root inside the command's
        namespaces and the command user is `user`; elsewhere both are the caller (`separates_trusted` is False).
        """
        if "\0" in program:
            raise ValueError("the trusted program contains a NUL byte")
        return self._execute(program, timeout, trusted=job)

    def _check_run(self, timeout: float) -> None:
        if not self._started or self._closed:
            raise SandboxError("sandbox not started (call start(source) first) or already closed")
        if not (isinstance(timeout, int | float) and 0 < timeout < 10**7):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")

    def _execute(self, command: str, timeout: float, trusted: dict[str, Any] | None) -> CommandResult:
        self._check_run(timeout)
        self._counter += 1
        cg = self._res.cgroup
        child = None
        if cg is not None:
            try:
                memory = None if self.limits.memory is None else parse_size(self.limits.memory)
                child = cg.child(f"cmd-{self._counter}", self.limits.max_processes, memory)
            except OSError as exc:
                raise SandboxError(f"cannot create the command's cgroup under {cg.parent}: {exc}") from exc
        status_r, status_w = os.pipe()
        argv, env, cwd = self._command_line(status_w, timeout, child, trusted)
        argv.append(command)
        capture = OutputCapture(self.limits.output_limit)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                umask=0o022,  # the same file modes whatever the runner's umask (bwrap's folders: 0755)
                pass_fds=(status_w,),
            )
        except OSError as exc:
            os.close(status_r)
            os.close(status_w)
            if child is not None:
                cg.remove(child)  # type: ignore[union-attr]
            raise SandboxError(f"cannot start {argv[0]}: {exc}") from exc
        os.close(status_w)
        self._res.procs.add(proc)
        try:
            timed_out, status = self._communicate(proc, status_r, capture, t0 + timeout, child)
        finally:
            os.close(status_r)
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.returncode is None:
                self._kill(proc, child)
                proc.wait()
            self._res.procs.discard(proc)
            if child is not None and cg is not None:
                cg.remove(child)
        duration = time.monotonic() - t0
        raw, truncated = capture.result()
        # bwrap's own failure (and the cgroup joins before it) exit 1 before the command; a bwrap killed from outside
        # (-9) is not one
        started = status.endswith(READY) if self.isolation == "none" else BWRAP_STARTED in status
        if not started and not timed_out and (self.isolation == "none" or proc.returncode == 1):
            raise SandboxError(
                f"sandbox setup failed before the command ran (exit {proc.returncode}): "
                f"{raw.decode(errors='replace').strip()}"
            )
        return CommandResult(
            returncode=None if timed_out else proc.returncode,
            output=normalize_output(raw.decode("utf-8", errors="replace")),
            timed_out=timed_out,
            truncated=truncated,
            duration_s=duration,
        )

    def diff(self) -> str:
        """`git add -A` + `git diff --cached` against the baseline, in the sandbox's own git dir."""
        if not self._started or self._closed:
            raise SandboxError("sandbox not started (call start(source) first) or already closed")
        self._git(["add", "-A"])
        return self._git(["diff", *DIFF_FLAGS, self._baseline], limit=DIFF_LIMIT)

    def close(self) -> None:
        """Kill anything left, remove the cgroup and the host temp dir. Safe to call twice."""
        self._closed = True
        self._finalizer()

    # -- internals ------------------------------------------------------------------------------

    def _git(
        self, args: list[str], cwd: Path | None = None, git_dir: Path | bool | None = True, limit: int | None = None
    ) -> str:
        """Run git as the caller on the host, with no user/system config, hooks or fsmonitor.

        With `limit`, reading stops after that many bytes of output (PatchTooLargeError), so a huge
        workspace never costs the caller more than `limit` bytes of memory.
        """
        cmd = [self._git_exe]
        for c in GIT_CONFIG:
            cmd += ["-c", c]
        if git_dir is True:
            cmd += [f"--git-dir={self._git_dir}", f"--work-tree={self.host_path}"]
            cwd = self.host_path
        env = git_env(str(self._res.host_root))
        if limit is not None:
            return self._git_capped([*cmd, *args], cwd, env, limit)
        try:
            proc = subprocess.run(
                [*cmd, *args], cwd=cwd, env=env, capture_output=True, timeout=600, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"git {' '.join(args)} failed: {exc}") from exc
        if proc.returncode != 0:
            raise SandboxError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode("utf-8", errors="replace")

    def _git_capped(self, argv: list[str], cwd: Path | None, env: dict[str, str], limit: int) -> str:
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL
            )
            assert proc.stdout is not None
            data = proc.stdout.read(limit + 1)
            too_large = len(data) > limit
            if too_large:
                proc.kill()
            proc.stdout.close()
            proc.wait(timeout=600)
            if too_large:
                raise PatchTooLargeError(f"the workspace diff exceeds {limit} bytes (DIFF_LIMIT); nothing was kept")
            if proc.returncode != 0:
                err.seek(0)
                raise SandboxError(f"git {' '.join(argv[-3:])} failed: {err.read().decode(errors='replace').strip()}")
        return data.decode("utf-8", errors="replace")

    def _command_line(
        self, status_fd: int, timeout: float, child: list[Path] | None, trusted: dict[str, Any] | None = None
    ) -> tuple[list[str], dict[str, str], str]:
        """(argv without the command itself, environment, cwd) of one command; see the module docstring."""
        ws_host = str(self.host_path)
        env = command_env(self._python_bindir)
        cwd = "/"
        if self.isolation == "none":
            cwd = ws_host
            home = Path(str(self._res.host_root)) / "home"
            tmp = Path(str(self._res.host_root)) / "tmp"
            for d in (home, tmp):
                d.mkdir(exist_ok=True, mode=0o700)
                if self._root:
                    os.chown(d, self.uid, self.gid)
            env = {**command_env(self._python_bindir, home=str(home)), "TMPDIR": str(tmp)}
        run = self.limits.prlimit_args(self._prlimit, timeout)
        if self.isolation == "namespaces" or (self.isolation == "none" and self._root):
            run += setpriv_args(self._setpriv or "setpriv", self.uid, self.gid)
        elif self.isolation == "userns" and self._setpriv:
            run += setpriv_args(self._setpriv)
        if trusted is not None:
            # the trusted program runs as the namespace's root (no limits of the command's own) and starts the
            # untrusted part with `run` as its prefix: as `user`, under the limits, without privileges
            job = {**trusted, "env": env, "kill_leftovers": self.separates_trusted}
            env = {**env, "SPECTUNE_CHILD_PREFIX": json.dumps(run), "SPECTUNE_GRADER_JOB": json.dumps(job)}
            run = [os.path.join(self._python_bindir, "python"), "-I", "-c"]
        else:
            run += [self._bash, "-c"]
            # as if a shell had `cd`-ed into the workspace first, as the docker sandbox's does: the same bytes of `env`
            env = {**env, "OLDPWD": "/"}
            if self.isolation != "none":  # (the fallback's bash wrapper counts the shell level itself)
                env["SHLVL"] = "1"
        if self.isolation == "none":
            argv = run
        else:
            argv = [*self._bwrap_argv, "--json-status-fd", str(status_fd), "--", *run]
        # a shell first: is the runner still our parent (it may have died before setpriv set the parent-death
        # signal), then join the cgroups before anything starts, so every process is counted and can be killed
        q = shlex.quote
        steps = [f'[ "$PPID" = {os.getpid()} ]'] if self._setpriv else []
        steps += [f"echo 0 > {q(str(folder / 'cgroup.procs'))}" for folder in child or []]
        if self.isolation == "none":
            steps += [f"printf {READY.decode()} >&{status_fd}", f"exec {status_fd}>&-"]
        if steps:  # dash (sh) starts faster, but writes to single-digit fds only
            shell = self._bash if self.isolation == "none" else self._sh
            argv = [shell, "-c", " && ".join([*steps, 'exec "$@"']), "spectune-init", *argv]
        if self._setpriv:  # the runner dies (even by SIGKILL) -> this process dies -> the command dies
            argv = [self._setpriv, "--pdeathsig", "KILL", *argv]
        return argv, env, cwd

    def _kill(self, proc: subprocess.Popen[bytes], child: list[Path] | None) -> None:
        _kill_group(proc)
        if child and self._res.cgroup is not None:
            self._res.cgroup.kill(child[0])

    def _communicate(
        self,
        proc: subprocess.Popen[bytes],
        status_fd: int,
        capture: OutputCapture,
        deadline: float,
        child: list[Path] | None,
    ) -> tuple[bool, bytes]:
        """Drain output and status until both close or the deadline passes. (timed_out, status)."""
        assert proc.stdout is not None
        out_fd = proc.stdout.fileno()
        status = bytearray()
        sel = selectors.DefaultSelector()
        sel.register(out_fd, selectors.EVENT_READ)
        sel.register(status_fd, selectors.EVENT_READ)
        open_fds = {out_fd, status_fd}
        # Without a PID namespace, background processes of a finished command may hold the pipe
        # open; poll for the shell's exit so they are killed then rather than at the timeout.
        tick = 0.05 if self.isolation == "none" else None
        timed_out = False
        exited_at: float | None = None

        def pump(wait: float) -> None:
            for key, _ in sel.select(wait):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fd)
                    open_fds.discard(key.fd)
                elif key.fd == out_fd:
                    capture.feed(data)
                else:
                    status.extend(data)

        try:
            while open_fds:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                pump(min(remaining, tick) if tick else remaining)
                if tick and exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                    self._kill(proc, child)  # leftovers of a finished command
            if not timed_out:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                self._kill(proc, child)
                end = time.monotonic() + 5.0
                while open_fds and time.monotonic() < end:
                    pump(0.1)
                proc.wait()
        finally:
            sel.close()
        return timed_out, bytes(status)
