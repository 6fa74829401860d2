"""LocalSandbox: run an agent's shell commands on this machine, in Linux namespaces, as `nobody`.

What it protects against -- accidents and careless or greedy code, which is what a coding agent
produces: runaway processes and fork loops (a pids cgroup and RLIMIT_NPROC cap the number of
processes; the whole tree, including processes that `setsid` or double-fork, dies at the timeout and
whenever the command ends, because it lives in its own PID namespace, and when the runner dies,
even by SIGKILL, through a parent-death signal on unshare); memory and disk hogs (a memory cgroup
caps the whole command tree, the workspace is a size-capped tmpfs, RLIMIT_AS, RLIMIT_FSIZE,
RLIMIT_CPU, RLIMIT_NOFILE, size-capped private tmpfs); output floods (only the
first and last halves of DEFAULT_OUTPUT_LIMIT bytes are kept, the pipe is always drained); writes
outside the workspace (commands run as an unprivileged user with no capabilities and
no_new_privs, the root filesystem is remounted read-only in a private mount namespace, and
/tmp, /var/tmp, /dev/shm and /run are fresh private tmpfs that vanish with the command, so host
service sockets under /run are out of reach; a Python the commands run from a folder below one
of them, a cache under /tmp say, is bound read-only at its own path into that fresh tmpfs);
network access (a fresh network namespace with only its own loopback: no route to the host's
127.0.0.1 or anywhere else); and secret leakage (the environment is rebuilt from a fixed list, no
variable of the caller passes through; the project tree, root's home and anything else not
readable by the unprivileged user are hidden or unreadable; `python` is the task environment of
tasks/sandbox/task_python.py, not the runner's venv).

What it does NOT protect against: a determined attacker. It shares the host kernel, so a kernel
exploit escapes it; host files readable by `nobody` (most of /usr, /etc) stay readable; the CPU
and the page cache are shared, so one command can slow others; RLIMIT_NPROC counts all processes
of the unprivileged user on the machine. It is not a security boundary -- use a VM for that.

How a command runs (`isolation="namespaces"`, chosen automatically when the caller is root):

    setpriv --pdeathsig KILL unshare --mount --pid --fork --kill-child --net --uts --ipc --mount-proc
      bash (PID 1 of the new PID namespace, root inside it): joins the per-command pids and memory cgroups,
        bind-mounts the host temp dir onto /workspace, hides masked paths, mounts the tmpfs
        (with the interpreter's paths below them re-bound read-only),
        remounts / read-only, brings up the private loopback, sets the hostname "sandbox", then
        prlimit ... -- setpriv --reuid=nobody ... --no-new-privs --bounding-set=-all
          bash -c COMMAND   (cwd /workspace, stdout and stderr on one pipe, stdin /dev/null)

When PID 1 exits the kernel kills everything else in the namespace, so a command never leaves
processes behind; on timeout the sandbox SIGKILLs unshare's process group (which holds PID 1) and
everything in the command's cgroup. A non-root caller gets the same through a user namespace
(`unshare --user --map-root-user`), minus the separate user and the cgroup (see `warnings`). Where
no namespace can be made, `isolation="none"` (or "auto" falling back) runs a plain process group
with the same rlimits and environment and lists every protection it lacks in `warnings`; under
CI=true a sandbox without network isolation refuses to start.

Observations are deterministic: the workspace is always at /workspace, /tmp is empty (but for
the read-only path to a Python that lies below it) and the hostname fixed at every command,
PYTHONHASHSEED=0, no pytest cache, and pytest's session timing is stripped from its summary line
(`normalize_output`). The baseline and `diff()` live in a git directory outside the workspace that
the command cannot touch (the workspace also gets its own `.git` with the same baseline commit, for
the agent's `git diff`/`git status`). The host temp dir and the cgroups carry the runner's owner
token (tasks/sandbox/owner.py): those of a runner that died are removed by the next sandbox made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pwd
import re
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

from tasks.sandbox.base import DEFAULT_TIMEOUT_S, DIFF_LIMIT, WORKSPACE, CommandResult, PatchTooLargeError, SandboxError
from tasks.sandbox.limits import Limits, OutputCapture, parse_size, setpriv_args
from tasks.sandbox.local_cgroup import CommandCgroups, reap_stale_cgroups
from tasks.sandbox.owner import mark, reap_stale_dirs
from tasks.sandbox.task_python import ENV_VAR as TASK_PYTHON_ENV
from tasks.sandbox.task_python import note_private_tmpfs, task_python

ISOLATION_MODES = ("auto", "namespaces", "none")
PYTHON_ENVS = ("task", "runner")
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # hidden from commands by default
HOSTNAME = "sandbox"
FIXED_DATE = "2000-01-01T00:00:00+0000"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "spectune",
    "GIT_AUTHOR_EMAIL": "spectune@localhost",
    "GIT_AUTHOR_DATE": FIXED_DATE,
    "GIT_COMMITTER_NAME": "spectune",
    "GIT_COMMITTER_EMAIL": "spectune@localhost",
    "GIT_COMMITTER_DATE": FIXED_DATE,
}
# `git -c` settings for every git the sandbox runs itself (as root, on the host): no hooks, no
# fsmonitor, no line-ending conversion, no signing, stable abbreviations, no attributes file of the user's.
GIT_CONFIG = (
    "core.attributesFile=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.abbrev=12",
    "core.quotePath=true",
    "commit.gpgsign=false",
    "gc.auto=0",
    "init.defaultBranch=main",
    "safe.directory=*",
)
# `git diff` of the workspace against the baseline: no colour, no external tools, fixed prefixes.
DIFF_FLAGS = (
    "--cached",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--binary",  # a binary file in the workspace must not make the whole diff unappliable
    "--src-prefix=a/",
    "--dst-prefix=b/",
)
# $GIT_DIR/info/attributes of the sandbox's own baseline repository (both sandboxes): the highest precedence of all
# attribute sources, and `!attr` (unspecified) there counts as decided, so no .gitattributes of the workspace (nor a
# macro it defines, `binary` = `-diff -merge -text` included) can change how a file is added or diffed: no eol or
# encoding conversion, no clean filter, no `$Id$` collapse, no `-diff` hiding a text file behind a binary patch. Every
# attribute git itself reads is listed; `diff` left unspecified means git's own test (a NUL byte: binary).
BASELINE_ATTRIBUTES = (
    "* !text !crlf !eol !ident !filter !working-tree-encoding !diff !merge !conflict-marker-size !whitespace"
    " !export-ignore !export-subst !delta !encoding !binary"
)
# Directories every user may write: in the namespace each becomes a private, size-capped tmpfs.
TMPFS_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # a private /run: no host service sockets
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READY = b"SPECTUNE-SANDBOX-READY"

# pytest's final summary line ends with the session's wall time: "=== 3 passed, 1 warning in
# 0.12s ===", "3 passed in 0.12s" (-q), "=== 1 failed in 75.02s (0:01:15) ===", "no tests ran in
# 0.01s". The time, and the `=` padding whose width depends on it, vary from run to run;
# normalize_output rewrites such lines to "=== 3 passed, 1 warning ===" / "3 passed".
PYTEST_SUMMARY_RE = re.compile(
    r"^(?P<eq>=+ )?"
    r"(?P<counts>(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)(?:, )?)+"
    r"|no tests ran)"
    r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?(?(eq) =+)$",
    re.MULTILINE,
)


def normalize_output(text: str) -> str:
    """Strip pytest's session time from its summary lines (see PYTEST_SUMMARY_RE)."""

    def repl(m: re.Match[str]) -> str:
        return f"=== {m['counts']} ===" if m["eq"] else m["counts"]

    return PYTEST_SUMMARY_RE.sub(repl, text)


def command_env(extra_path: str | None = None, home: str = "/tmp") -> dict[str, str]:
    """The whole environment of a command: fixed values only, nothing inherited from the caller.

    PATH starts with `extra_path`, by default the task environment's bin (`task_python()`: the
    host's interpreter with pytest and nothing of spectune's), then /usr/local/bin:/usr/bin:/bin.
    """
    bindir = extra_path if extra_path is not None else str(task_python().bindir)
    path = [bindir, "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "PATH": ":".join(dict.fromkeys(p for p in path if p)),
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "COLUMNS": "80",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # prints and tracebacks interleave in the order they happen
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # task code runs with the plugins it names, no others
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    env.update(GIT_IDENTITY)
    return env


def git_env(home: str) -> dict[str, str]:
    """Environment of the git the sandbox runs itself (not a command's): no user or system configuration."""
    return {
        "PATH": SBIN_PATH,
        "HOME": home,
        "LC_ALL": "C",
        "TZ": "UTC",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",  # nor the system's gitattributes file (GIT_CONFIG_NOSYSTEM does not cover it)
        **GIT_IDENTITY,
    }


# ------------------------------------------------------------------------------------------------
# host helpers


def _which(name: str, path: str = SBIN_PATH) -> str | None:
    return shutil.which(name, path=path)


def _need(name: str) -> str:
    found = _which(name)
    if found is None:
        raise SandboxError(f"`{name}` not found in {SBIN_PATH}; install util-linux/iproute2/git (apt-get install ...)")
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


def _may(st: os.stat_result, uid: int, gids: set[int], bits: int) -> bool:
    """Whether `uid` with groups `gids` has all of `bits` (a combination of 4, 2, 1) on `st`."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        mode = st.st_mode >> 6
    elif st.st_gid in gids:
        mode = st.st_mode >> 3
    else:
        mode = st.st_mode
    return (mode & bits) == bits


def _blocked_at(path: str, uid: int, gids: set[int]) -> str | None:
    """The first directory on the way to `path` (itself included) that `uid` cannot enter or list."""
    real = os.path.realpath(path)
    parts = Path(real).parts
    for i in range(1, len(parts) + 1):
        sub = os.path.join(*parts[:i])
        try:
            st = os.stat(sub)
        except OSError:
            return None
        need = 5 if i == len(parts) else 1
        if not _may(st, uid, gids, need):
            return sub
    return None


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _outermost(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if not any(q != p and _within(p, q) for q in paths))


def _private_tmpfs_dirs() -> tuple[str, ...]:
    """The dirs of TMPFS_DIRS that commands get a private tmpfs on: those that are real dirs here."""
    return tuple(d for d in TMPFS_DIRS if os.path.isdir(d) and not os.path.islink(d))


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


@dataclass(frozen=True)
class _Mask:
    """A host directory replaced, inside the namespace, by an empty skeleton with `exposed` re-bound."""

    path: str
    exposed: tuple[str, ...]


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
      hidden_paths: host directories replaced by empty ones inside the sandbox; default: the
        project tree (PROJECT_ROOT: the harness, task data and hidden tests). Paths the
        interpreter needs are re-exposed read-only.
      expose_paths: extra host paths commands must be able to read although something on their
        way is not readable by `user` (the interpreter's own prefixes are exposed automatically).
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
        hidden_paths: list[str] | tuple[str, ...] | None = None,
        expose_paths: list[str] | tuple[str, ...] = (),
        base_dir: str | Path | None = None,
        use_cgroup: bool = True,
        python_env: str = "task",
        **limit_overrides: Any,
    ) -> None:
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        if python_env not in PYTHON_ENVS:
            raise ValueError(f"python_env must be one of {PYTHON_ENVS}, got {python_env!r}")
        _reap_once(base_dir)
        self.python_env = python_env
        if python_env == "task":
            env = task_python()
            self._python_bindir, self._python_paths = str(env.bindir), env.needed_paths()
        else:
            self._python_bindir = os.path.dirname(os.path.abspath(sys.executable))
            self._python_paths = [
                sys.prefix,
                sys.base_prefix,
                sys.exec_prefix,
                sys.base_exec_prefix,
                self._python_bindir,
                os.path.dirname(os.path.realpath(sys.executable)),
            ]
        fields = {f.name for f in dataclasses.fields(Limits)}
        unknown = set(limit_overrides) - fields
        if unknown:
            raise TypeError(f"unknown LocalSandbox option(s): {sorted(unknown)}; limits are {sorted(fields)}")
        self.limits = dataclasses.replace(limits or Limits(), **limit_overrides)
        self.warnings: list[str] = []
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self._hidden = (str(PROJECT_ROOT),) if hidden_paths is None else tuple(hidden_paths)
        self._expose = tuple(expose_paths)
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, _release, self._res)
        self._closed = False
        self._started = False
        self._counter = 0
        self._baseline = ""
        self.host_path: Path | None = None

        self._bash = _need("bash")
        self._git_exe = _need("git")
        self._prlimit = _need("prlimit")
        self._unshare = _which("unshare")
        self._setpriv = _which("setpriv")
        self._mount = _which("mount")
        self._ip = _which("ip")
        self._hostname = _which("hostname")

        # who runs commands
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

        # which isolation works here
        self.isolation = "none"
        why_not = "forced by isolation='none'"
        if isolation != "none":
            if self._unshare is None or self._mount is None:
                why_not = "`unshare`/`mount` (util-linux) not found"
            else:
                why_not = _probe((self._unshare, *self._ns_flags(userns=not self._root), _need("true"))) or ""
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
                f"CI=true requires network isolation, but `unshare --net` does not work here ({why_not}); "
                "run the tests as root or where user namespaces are allowed"
            )

        if self.isolation == "none":
            self.warnings += [
                f"no namespaces ({why_not}): the network is NOT isolated",
                "no mount namespace: commands see the real host filesystem, /tmp is the host's, "
                "and they run in the host temp dir, not at /workspace (paths in output vary)",
                "no PID namespace: a process that leaves the command's process group survives the "
                "timeout unless the pids cgroup catches it",
            ]
            if not self._root:
                self.warnings.append("not root: commands run as the caller and can write wherever the caller can")
        elif self.isolation == "userns":
            self.warnings.append(
                f"user namespace without root: commands run as the caller (uid {self.uid}) with no capabilities, "
                "so host files the caller can write outside the read-only root stay writable"
            )
            if not Path(WORKSPACE).is_dir():
                self.warnings.append(
                    f"{WORKSPACE} does not exist and only root can create it: commands run in the "
                    "host temp dir instead (paths in output vary)"
                )
        if self.isolation == "namespaces":
            with contextlib.suppress(FileExistsError):
                os.mkdir(WORKSPACE, 0o755)  # empty mount point; the workspace is bind-mounted on it
        if self.isolation != "none" and self._ip is None:
            self.warnings.append(
                "`ip` (iproute2) not found: the private loopback stays down, so servers on "
                "127.0.0.1 inside a command are unreachable"
            )

        needed = self._needed_paths()
        self._tmpfs_views = self._plan_tmpfs_views(needed)
        self._masks = self._plan_masks(needed)
        if python_env == "task" and self.isolation != "none":
            note_private_tmpfs(env, _private_tmpfs_dirs())

        if self.limits.workspace_size is not None and self.isolation != "namespaces":
            self.warnings.append(
                "no workspace size cap (needs root and namespaces): RLIMIT_FSIZE caps single files only"
            )
        # the cgroups (last: nothing after them may fail and leave them behind until the finalizer)
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

    # -- construction helpers --------------------------------------------------------------------

    @staticmethod
    def _ns_flags(userns: bool) -> list[str]:
        flags = ["--user", "--map-root-user"] if userns else []
        return [
            *flags,
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--kill-child",
            "--net",
            "--uts",
            "--ipc",
            "--mount-proc",
        ]

    def _interpreter_paths(self) -> set[str]:
        return {os.path.realpath(p) for p in self._python_paths if p and os.path.exists(p)}

    def _needed_paths(self) -> set[str]:
        """Host paths commands must be able to read: the interpreter's and `expose_paths`, resolved."""
        return self._interpreter_paths() | {os.path.realpath(p) for p in self._expose}

    def _plan_tmpfs_views(self, needed: set[str]) -> dict[str, tuple[str, ...]]:
        """Which needed paths lie under a dir that commands see as a fresh private tmpfs, by that dir.

        Each is bound read-only at its own path into the command's tmpfs (see `_write_fstab`), so a cache,
        task environment or venv under /tmp works; only a dir of TMPFS_DIRS itself cannot be re-exposed.
        """
        if self.isolation == "none":  # no mount namespace: commands see the host's dirs themselves
            return {}
        views: dict[str, tuple[str, ...]] = {}
        for d in _private_tmpfs_dirs():
            inside = {p for p in needed if _within(p, d)}
            if d in inside:
                raise SandboxError(
                    f"cannot expose {d} itself read-only to sandboxed commands: each gets a private writable tmpfs "
                    f"there; use a folder below it (for the task environment: {TASK_PYTHON_ENV}=<a folder>)"
                )
            for p in sorted(inside):
                if not os.path.lexists(p):  # nothing to bind: say so here rather than fail every command's set-up
                    self.warnings.append(f"{p} does not exist: commands cannot see it")
                    inside.discard(p)
            if inside:
                views[d] = tuple(_outermost(inside))
        if self.isolation == "namespaces":  # the folders on the way are fresh 0755 ones: only the path itself counts
            gids = {self.gid}
            for p in (p for paths in views.values() for p in paths):
                st = os.stat(p)
                if not _may(st, self.uid, gids, 5 if os.path.isdir(p) else 4):
                    self.warnings.append(f"{p} is not readable by uid {self.uid}; change its mode")
        return views

    def _plan_masks(self, needed: set[str]) -> list[_Mask]:
        """Which host dirs to hide inside the namespace, and what to re-expose under each."""
        gids = {self.gid}
        if self.isolation == "none":
            for p in sorted(needed):
                if _blocked_at(p, self.uid, gids):
                    self.warnings.append(f"{p} is not readable by uid {self.uid}: `python` may not run in commands")
            return []
        # whatever lies under a private tmpfs is hidden by it already, and re-exposed by `_plan_tmpfs_views`
        tmpfs_dirs = _private_tmpfs_dirs()
        needed = {p for p in needed if not any(_within(p, d) for d in tmpfs_dirs)}
        masks: set[str] = set()
        for p in self._hidden:
            real = os.path.realpath(p)
            if real == "/" or any(_within(d, real) for d in (*TMPFS_DIRS, "/proc", "/dev", "/sys", WORKSPACE)):
                raise SandboxError(f"cannot hide {p}: it contains a directory the sandbox needs")
            if os.path.isdir(real):
                masks.add(real)
        if self.isolation == "namespaces":  # the user differs from the caller: make the interpreter reachable
            for p in needed:
                blocked = _blocked_at(p, self.uid, gids)
                if blocked and blocked != p and blocked != "/":
                    masks.add(blocked)
                elif blocked:
                    self.warnings.append(f"{p} is not readable by uid {self.uid}; pass expose_paths or change its mode")
        masks -= needed  # a needed path is never hidden itself
        masks = {m for m in masks if not any(_within(m, d) for d in tmpfs_dirs)}
        out = []
        for m in _outermost(masks):
            exposed = _outermost({p for p in needed if _within(p, m) and p != m})
            out.append(_Mask(m, tuple(exposed)))
        return out

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
            self._write_fstab(root)
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
        argv, env = self._command_line(status_w, timeout, child, trusted)
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
                cwd="/",
                start_new_session=True,
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
        if not status.endswith(READY) and not timed_out:
            raise SandboxError(
                f"sandbox setup failed before the command ran (exit {proc.returncode}): "
                f"{status.decode(errors='replace').strip() or raw.decode(errors='replace').strip()}"
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

    def _write_fstab(self, root: Path) -> None:
        """The mounts every command gets, for one `mount -a -T fstab` (one exec instead of ten).

        In order: the workspace onto /workspace; for each masked dir, its re-exposed paths bound
        read-only into an empty root-owned skeleton; for each world-writable dir that holds a needed
        path (`_tmpfs_views`), its private tmpfs made at a staging folder here, with those paths bound
        read-only into it at their place below the dir (`X-mount.mkdir` makes the folders on the way,
        0755 under the `umask 022` of `_command_line`); the skeletons recursively onto the masked
        dirs, then the staging tmpfs onto their dirs (the one that hides this host dir last: every
        source below it, the host's /tmp paths included, must be bound before); then any mask hiding
        this host dir; last, a private tmpfs on each other world-writable dir (this may hide the host
        temp dir, so it comes after every mount whose source lies in it). X-mount.mkdir makes
        directories only, so a needed *file* below a tmpfs dir splits the list in two (`_fstab_files`:
        the empty files the shell makes between the two). The root is remounted read-only after.
        """

        def esc(path: str | Path) -> str:
            return str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")

        lines = []
        self._fstab_has_workspace = Path(WORKSPACE).is_dir()
        if self._fstab_has_workspace:
            lines.append(f"{esc(self.host_path)} {WORKSPACE} none bind 0 0")
        masks = sorted(self._masks, key=lambda m: _within(str(root), m.path))  # one hiding our dir: last
        skels = []
        for i, mask in enumerate(masks):
            skel = root / "skel" / str(i)
            skel.mkdir(parents=True)
            for e in mask.exposed:
                target = skel / os.path.relpath(e, mask.path)
                target.mkdir(parents=True, exist_ok=True)
                lines.append(f"{esc(e)} {esc(target)} none bind,ro 0 0")
            skels.append((mask, skel))
        for dirpath, dirnames, _ in os.walk(root / "skel"):
            os.chmod(dirpath, 0o755)
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        size = self.limits.tmpfs_size
        # a source name of our own: `mount -a` skips an entry whose source+target is mounted
        tmpfs = f"tmpfs mode=1777,nosuid,nodev,size={size} 0 0"
        views = sorted(self._tmpfs_views.items(), key=lambda v: _within(str(root), v[0]))  # one hiding our dir: last
        stages, files, file_binds = [], [], []
        for i, (d, paths) in enumerate(views):
            stage = root / "tmpfs" / str(i)
            stage.mkdir(parents=True)
            lines.append(f"spectune-tmpfs {esc(stage)} {tmpfs}")
            for path in paths:
                target = stage / os.path.relpath(path, d)
                if os.path.isdir(path):
                    lines.append(f"{esc(path)} {esc(target)} none bind,ro,X-mount.mkdir 0 0")
                else:
                    files.append(target)
                    file_binds.append(f"{esc(path)} {esc(target)} none bind,ro 0 0")
            stages.append((d, stage))
        later = list(file_binds)
        later += [f"{esc(skel)} {esc(m.path)} none rbind 0 0" for m, skel in skels if not _within(str(root), m.path)]
        later += [f"{esc(stage)} {esc(d)} none rbind 0 0" for d, stage in stages]
        later += [f"{esc(skel)} {esc(m.path)} none rbind 0 0" for m, skel in skels if _within(str(root), m.path)]
        for d in _private_tmpfs_dirs():
            if d not in self._tmpfs_views:
                later.append(f"spectune-tmpfs {esc(d)} {tmpfs}")
        self._fstab = root / "fstab"
        self._fstab_files = files
        self._fstab_later: Path | None = None
        if files:
            self._fstab_later = root / "fstab.later"
            self._fstab_later.write_text("\n".join(later) + "\n")
        else:
            lines += later
        self._fstab.write_text("\n".join(lines) + "\n")

    def _command_line(
        self, status_fd: int, timeout: float, child: list[Path] | None, trusted: dict[str, Any] | None = None
    ) -> tuple[list[str], dict[str, str]]:
        q = shlex.quote
        fd = status_fd
        setup: list[str] = []
        for folder in child or []:
            setup.append(f"echo 0 > {q(str(folder / 'cgroup.procs'))}")
        ws_host = str(self.host_path)
        env = command_env(self._python_bindir)
        if self.isolation == "none":
            cwd = ws_host
            home = Path(str(self._res.host_root)) / "home"
            tmp = Path(str(self._res.host_root)) / "tmp"
            for d in (home, tmp):
                d.mkdir(exist_ok=True, mode=0o700)
                if self._root:
                    os.chown(d, self.uid, self.gid)
            env = {**command_env(self._python_bindir, home=str(home)), "TMPDIR": str(tmp)}
            argv_prefix: list[str] = []
        else:
            mount = q(self._mount or "mount")
            cwd = WORKSPACE if self._fstab_has_workspace else ws_host
            mounts = f"{mount} -a -T {q(str(self._fstab))}"
            if self._tmpfs_views:
                # the folders X-mount.mkdir makes on the way to a re-exposed path must be 0755 whatever the
                # runner's umask (a subshell: the command keeps its own); a file needs an empty file to bind onto
                steps = ["umask 022", mounts]
                if self._fstab_later is not None:
                    parents = " ".join(q(str(f.parent)) for f in self._fstab_files)
                    steps.append(f"{q(_which('mkdir') or 'mkdir')} -p -- {parents}")
                    steps += [f": > {q(str(f))}" for f in self._fstab_files]
                    steps.append(f"{mount} -a -T {q(str(self._fstab_later))}")
                mounts = f"( {' && '.join(steps)} )"
            setup.append(mounts)
            setup.append(f"{mount} -o remount,bind,ro /")
            if self._ip:
                setup.append(f"{q(self._ip)} link set lo up")
            # as root a write to /proc is enough (no exec); in a user namespace only sethostname(2) is allowed
            fallback = f"{q(self._hostname)} {HOSTNAME}" if self._hostname else ":"
            setup.append(f"{{ echo {HOSTNAME} > /proc/sys/kernel/hostname; }} 2>/dev/null || {fallback}")
            argv_prefix = [self._unshare or "unshare", *self._ns_flags(userns=self.isolation == "userns")]
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
            run = [os.path.join(self._python_bindir, "python"), "-I", "-c", '"$1"']
        else:
            run += [self._bash, "-c", '"$1"']
        script = "\n".join(
            [
                "set -e",
                "{",
                *(f"  {line}" for line in setup),
                "  :",
                f"}} >&{fd} 2>&{fd}",
                f"printf {READY.decode()} >&{fd}",
                f"exec {fd}>&-",
                "set +e",
                f"cd {q(cwd)}",
                " ".join(q(a) if a != '"$1"' else a for a in run),
                "exit $?",  # not the script's last command: bash would exec it, making it PID 1
            ]
        )
        argv = [*argv_prefix, self._bash, "--norc", "--noprofile", "-c", script, "spectune-init"]
        if self._setpriv:  # the runner dies (even by SIGKILL) -> unshare dies -> its namespace and all in it
            argv = [self._setpriv, "--pdeathsig", "KILL", *argv]
        return argv, env

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
