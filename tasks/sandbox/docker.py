"""The docker sandbox: one locked-down container per workspace.

Each `DockerSandbox` owns one container of the sandbox image (`python -m tasks.sandbox
build-image`): no network (`network_mode="none"`: not even the host's 127.0.0.1), capped memory
(no swap), CPUs and processes (`pids_limit`), a read-only root filesystem with a private tmpfs at
/tmp, no capabilities, no privilege gain, docker-init reaping orphans and, as the main process,
a watchdog on the runner (below). `start(source)` copies `source` (without .git) into
/workspace, an anonymous volume owned by the sandbox user (65534; a tmpfs of `workspace_size`, so
a command cannot fill the host's disk), and commits a baseline with
fixed names and dates twice: in /workspace/.git for the agent, and in a root-only tmpfs
(/run/spectune) for `diff()`, out of the agent's reach. Every `run` is a `docker exec` of
`bash -c` as the sandbox user in /workspace, under the same `prlimit` limits as the local sandbox.

Observations are byte-for-byte those of the local sandbox: the host's base Python installation and
the task environment (tasks/sandbox/task_python.py; `python_env="runner"`: the running venv) are
bind-mounted read-only at the same paths (one under /tmp too: inside the container's /tmp tmpfs), so
`python -m pytest` inside is the host's interpreter with the same packages as in the local sandbox, on a
Debian bookworm image (the host's OS, so the interpreter's shared libraries are there); the
environment is a fixed list (`sandbox_env`), nothing inherited; stdout and stderr share one pipe;
pytest's session timing is stripped from its summary lines (`normalize_output`); git runs with the
local sandbox's settings, identity and diff flags; output is capped by the same `OutputCapture`.
What differs: `ps` shows the container's init, its `cat` and the wrapper below; RLIMIT_NPROC is not set
(`pids_limit` counts per container, where RLIMIT_NPROC would count the uid's processes in every
container and on the host alike).

A command's process tree dies with it: `timeout --kill-after` ends the command at its timeout,
then the wrapper kills every process of the sandbox user (`kill -KILL -1`), which also takes
`setsid` grandchildren and background jobs; a client-side deadline repeats the kill from a second
exec as a backstop, and restarts the container as a last resort (a plain workspace volume survives
the restart; with `workspace_size`, the default, the volume is a tmpfs and, like the root-only
tmpfs holding the baseline repository, comes back empty: after a restart the sandbox refuses every
further command and `diff()` with a SandboxError saying so, instead of answering from an empty workspace).

A container dies with its runner, at once, however the runner ends (SIGKILL included): its main
process (root's, out of the sandbox user's reach) is `cat > /dev/null` reading the container's
stdin (`stdin_open`, and `StdinOnce`: the stdin closes when the attached client goes), and the
sandbox attaches to that stdin before it starts the container and holds the connection until
`close()`. When the runner's process ends, the kernel closes its end, dockerd closes the stdin,
`cat` reads end of file and exits, docker-init with it, and the container stops; `auto_remove`
then removes it and its workspace volume. A last-resort restart attaches again. As a second line,
containers are labelled with their runner's owner token, and the first sandbox a process makes
removes the containers (and temp folders) of runners that died without closing theirs (one
killed between creating its container and attaching, for instance).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.units import GIB
from tasks.sandbox.base import (
    DEFAULT_OUTPUT_LIMIT,
    DEFAULT_TIMEOUT_S,
    DIFF_LIMIT,
    WORKSPACE,
    CommandResult,
    PatchTooLargeError,
    SandboxError,
)
from tasks.sandbox.image import DEFAULT_TAG
from tasks.sandbox.limits import MIB, Limits, OutputCapture, setpriv_args
from tasks.sandbox.owner import is_alive, owner_token, reap_stale_dirs
from tasks.sandbox.task_python import note_private_tmpfs, task_python
from tasks.sandbox.workspace import (  # git settings, environments and output normalisation: the same bytes as local
    BASELINE_ATTRIBUTES,
    DIFF_FLAGS,
    GIT_CONFIG,
    GIT_IDENTITY,
    SBIN_PATH,
    command_env,
    git_env,
    normalize_output,
)

DEFAULT_IMAGE = DEFAULT_TAG
SANDBOX_UID = 65534  # nobody: owns the image's /workspace
KILL_AFTER_S = 2  # `timeout --kill-after`: SIGKILL this long after SIGTERM
BACKSTOP_S = 10.0  # client-side deadline beyond timeout + KILL_AFTER_S
PING_TIMEOUT_S = 3.0
API_TIMEOUT_S = 120.0
OWNER_LABEL = "org.spectune.owner"  # `<host>:<owner token>` of the process that made the container
BASELINE_DIR = "/run/spectune"  # root-only tmpfs: the sandbox's own baseline repository
BASELINE_GIT = f"{BASELINE_DIR}/baseline.git"
# the container's main process: ends (and with it the container) when the runner's attached stdin closes
WATCHDOG_COMMAND = ["sh", "-c", "exec cat > /dev/null"]
# the container's private tmpfs: a host path below it (a task environment in a cache under /tmp) is still bind-mounted
# at its own path, the daemon mounting the tmpfs first (it orders mounts by depth) and making the folders on the way
CONTAINER_TMP = "/tmp"
REMOVE_WAIT_S = 10.0  # close(): how long to wait for a removal the daemon already has in progress


START_HELP = (
    "Start a Docker daemon: `apt-get install -y docker.io && (dockerd > /tmp/dockerd.log 2>&1 &)` "
    "(or `systemctl start docker`), wait for `docker info` to answer, then build the sandbox image "
    "with `python -m tasks.sandbox build-image`."
)
BUILD_HELP = (
    "Build it with `python -m tasks.sandbox build-image` (offline via debootstrap when Docker Hub is unreachable)."
)


def sandbox_env(bindir: str | None = None) -> dict[str, str]:
    """The complete environment of every command: fixed values, nothing from the host's environment.

    PATH starts with `bindir` (default: the task environment's bin, mounted at the same path
    inside), then /usr/local/bin:/usr/bin:/bin.
    """
    return command_env(bindir)  # the local sandbox's environment: both must print the same bytes


strip_pytest_timing = normalize_output  # the local sandbox's normalisation: one definition, the same bytes


def _parse_user(user: int | str) -> tuple[int, int]:
    text = str(user)
    uid_text, _, gid_text = text.partition(":")
    try:
        uid = int(uid_text)
        gid = int(gid_text) if gid_text else uid
    except ValueError:
        raise ConfigError(f"user must be a numeric uid or 'uid:gid', got {user!r}") from None
    if uid == 0:
        raise ConfigError("the sandbox user must be unprivileged (uid != 0)")
    return uid, gid


_SYSTEM_PREFIXES = {"/", "/usr", "/usr/local"}


def host_python_paths(venv: str | None = None) -> list[tuple[str, str]]:
    """(host path, container path) pairs that make the host's `python` (of `venv`) work unchanged inside.

    `venv` defaults to the task environment (tasks/sandbox/task_python.py); pass `sys.prefix` for
    the running interpreter's own environment.

    A self-contained installation (pyenv, /opt/python, a virtual environment) is mounted whole.
    A distribution Python under /usr cannot be (it would hide the image's /usr): its standard
    library, site directories and the interpreter binary (at every name of its symlink chain) are
    mounted one by one.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = os.path.normpath(venv or str(task_python().root))
    inside_to_host: dict[str, str] = {}
    for prefix in dict.fromkeys(os.path.normpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, venv)):
        if prefix not in _SYSTEM_PREFIXES:
            inside_to_host[prefix] = prefix
            continue
        subs = [f"lib/{version}", "lib/python3/dist-packages"]
        if prefix != "/usr/local":
            subs += [f"local/lib/{version}", "local/lib/python3/dist-packages"]
        for sub in subs:
            candidate = os.path.join(prefix, sub)
            if os.path.isdir(candidate):
                inside_to_host[candidate] = candidate
        # the interpreter: every name on the way from `python` to the real binary
        link = os.path.join(venv, "bin", "python")
        if not os.path.lexists(link):
            link = sys.executable
        real = os.path.realpath(link)
        inside_to_host.setdefault(real, real)
        for _ in range(16):
            if not os.path.islink(link):
                break
            link = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
            if not link.startswith(venv + os.sep):
                inside_to_host.setdefault(link, real)
    # a mount inside another mount of the same directory adds nothing
    kept: list[tuple[str, str]] = []
    for inside, host in sorted(inside_to_host.items()):
        if host == inside and any(h == i and inside.startswith(i.rstrip("/") + "/") for h, i in kept):
            continue
        kept.append((host, inside))
    return kept


def connect(base_url: str | None = None, ping_timeout: float = PING_TIMEOUT_S, api_timeout: float = API_TIMEOUT_S):
    """A docker client whose daemon answered a ping within `ping_timeout` s, else SandboxError."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - docker is a dependency
        raise SandboxError(f"the docker Python package is missing ({e}); pip install docker. {START_HELP}") from e
    where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, timeout=ping_timeout, version="auto")
        else:
            client = docker.from_env(timeout=ping_timeout)
        client.ping()
    except Exception as e:
        raise SandboxError(f"no Docker daemon answers at {where} ({type(e).__name__}: {e}). {START_HELP}") from e
    client.api.timeout = api_timeout  # later calls (image pulls, archive copies) may take longer
    return client


def _tar_source(source: Path, uid: int, gid: int) -> tempfile.SpooledTemporaryFile:
    """A tar of `source` without any `.git` (like the local sandbox's copy), owned by uid:gid, sorted."""
    buf = tempfile.SpooledTemporaryFile(max_size=64 * 2**20)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(path: Path, arcname: str) -> None:
            info = tar.gettarinfo(str(path), arcname)
            if not (info.isfile() or info.isdir() or info.issym()):
                return  # sockets, fifos, devices: not part of a repository
            info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
            if info.isfile():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)

        for root, dirs, files in os.walk(source):
            rel_root = Path(root).relative_to(source)
            dirs[:] = sorted(d for d in dirs if d != ".git")
            for name in sorted([*dirs, *(f for f in files if f != ".git")]):
                path = Path(root) / name
                add(path, str(rel_root / name) if rel_root != Path(".") else name)
    buf.seek(0)
    return buf


def _bash_path() -> str:
    """bash by the name the host finds it (its `$0` shows in error messages: same bytes as the local sandbox)."""
    found = shutil.which("bash", path=SBIN_PATH)
    return found if found and found.startswith(("/usr/bin/", "/bin/")) else "/usr/bin/bash"


# The script the exec runs as the sandbox user, from /: $1 is the timeout, $2 the prlimit options,
# $3 the command. The command's stdout and stderr share the exec's stdout pipe; the wrapper's own
# stderr (bash's "Killed" report when `timeout` SIGKILLs) goes nowhere. Afterwards
# `kill -KILL -1` ends every process of the sandbox user but the wrapper itself: background jobs,
# setsid grandchildren, anything that survived `timeout`.
_WRAPPER = (
    "exec 2>/dev/null </dev/null; cd {ws} || exit 125; "
    'timeout --kill-after={kill}s "$1" prlimit $2 -- {bash} -c "$3" 2>&1; '
    "rc=$?; kill -KILL -1; exit $rc"
)


def _git_cmd(*args: str, git_dir: bool = False) -> str:
    """A git command line with the sandbox's fixed settings (as a shell string)."""
    parts = ["git", *(f"-c {shlex.quote(c)}" for c in GIT_CONFIG)]
    if git_dir:
        parts += [f"--git-dir={BASELINE_GIT}", f"--work-tree={WORKSPACE}"]
    return " ".join([*parts, *(shlex.quote(a) for a in args)])


def _baseline_script(git_dir: bool) -> str:
    # the sandbox's own repository reads no attribute of the workspace's (BASELINE_ATTRIBUTES)
    attributes = (
        [
            f"mkdir -p {BASELINE_GIT}/info",
            f"printf '%s\\n' {shlex.quote(BASELINE_ATTRIBUTES)} > {BASELINE_GIT}/info/attributes",
        ]
        if git_dir
        else []
    )
    return " && ".join(
        [
            "set -e",
            "exec 2>&1",
            f"cd {WORKSPACE}",
            _git_cmd("init", "-q", "--template=", git_dir=git_dir),
            *attributes,
            _git_cmd("add", "-A", git_dir=git_dir),
            _git_cmd("commit", "-q", "--no-verify", "--allow-empty", "-m", "baseline", git_dir=git_dir),
            _git_cmd("rev-parse", "HEAD", git_dir=git_dir),
        ]
    )


class DockerSandbox:
    """One container, one workspace at /workspace, commands as an unprivileged user.

    Limits per command mirror the local sandbox's (`prlimit`): RLIMIT_AS `address_space`,
    RLIMIT_FSIZE `file_size`, RLIMIT_NOFILE `open_files`, no core files, RLIMIT_CPU
    ceil(timeout x CPUs) + 1 s as a backstop. Per container: `memory` (no swap), `cpus`,
    `pids_limit` (every process and thread), a `tmpfs_size` /tmp.
    """

    name = "docker"

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        memory: str = "2g",
        cpus: float = 1.0,
        pids_limit: int = 256,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        user: int | str = SANDBOX_UID,
        mount_host_python: bool = True,
        tmpfs_size: str = "512m",
        address_space: int | None = 4 * GIB,
        file_size: int | None = 64 * MIB,
        open_files: int | None = 1024,
        workspace_size: str | None = "1g",
        python_env: str = "task",
        base_url: str | None = None,
        ping_timeout: float = PING_TIMEOUT_S,
    ) -> None:
        if output_limit < 0:
            raise ConfigError(f"output_limit must be >= 0, got {output_limit}")
        self.image = image
        self.memory = memory
        self.cpus = cpus
        self.pids_limit = pids_limit
        self.uid, self.gid = _parse_user(user)
        self.mount_host_python = mount_host_python
        if python_env not in ("task", "runner"):
            raise ConfigError(f"python_env must be one of ('task', 'runner'), got {python_env!r}")
        self.python_env = python_env
        self.workspace_size = workspace_size
        task_env = task_python() if python_env == "task" else None
        self._venv = str(task_env.root) if task_env is not None else sys.prefix
        bindir = os.path.join(self._venv, "bin")
        # max_processes=None: no RLIMIT_NPROC here, `pids_limit` caps the container (see the module docstring)
        self.limits = Limits(
            max_processes=None,
            address_space=address_space,
            file_size=file_size,
            open_files=open_files,
            output_limit=output_limit,
            tmpfs_size=tmpfs_size,
        )
        self.env = sandbox_env(bindir if mount_host_python else "")
        if mount_host_python and os.path.normpath(self._venv) == CONTAINER_TMP:
            # mounted read-only over the container's /tmp, it would leave commands no writable /tmp at all
            raise SandboxError(f"the Python environment {self._venv} is {CONTAINER_TMP} itself; use a folder below it")
        if task_env is not None and mount_host_python:
            note_private_tmpfs(task_env, (CONTAINER_TMP,))
        self.bash = _bash_path()
        self.container: Any = None
        self._watchdog: Any = None  # the attached stdin of the container's main process (see the module docstring)
        self.baseline: str | None = None
        self._lost = False  # the last-resort restart emptied the workspace (see _restart)
        self._closed = False
        self.client = connect(base_url, ping_timeout)
        import docker.errors

        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            self.client.close()
            raise SandboxError(f"the sandbox image {image} does not exist. {BUILD_HELP}") from None
        except docker.errors.DockerException as e:
            self.client.close()
            raise SandboxError(f"cannot inspect the sandbox image {image}: {e}. {START_HELP}") from e
        _reap_once(self.client)

    # -- lifecycle ---------------------------------------------------------------------------

    def _mounts(self) -> list[Any]:
        from docker.types import Mount

        # an anonymous volume: starts as a copy of the image's /workspace (owner included), and
        # unlike a tmpfs it can receive put_archive on a read-only root filesystem
        # (with workspace_size: a tmpfs-backed volume of that size, so a command cannot fill the host's disk)
        driver = None
        if self.workspace_size is not None:
            from docker.types import DriverConfig

            options = f"size={self.workspace_size},uid={self.uid},gid={self.gid},mode=0755"
            driver = DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": options})
        mounts = [Mount(target=WORKSPACE, source=None, type="volume", driver_config=driver)]
        if self.mount_host_python:
            for host, inside in host_python_paths(self._venv):
                mounts.append(Mount(target=inside, source=host, type="bind", read_only=True))
        return mounts

    def start(self, source: Path) -> None:
        """Create the container, copy `source` (without .git) into /workspace, commit the baseline.

        The baseline is committed twice, identically: in /workspace/.git for the agent's own
        `git status`/`git diff`, and in a root-only repository outside the workspace that
        `diff()` uses, which nothing the agent does can touch.
        """
        import docker.errors

        if self._closed:
            raise SandboxError("this sandbox was closed; make a new one")
        if self.container is not None:
            raise SandboxError("this sandbox was already started; make one per workspace")
        source = Path(source)
        if not source.is_dir():
            raise SandboxError(f"source {source} is not a directory")
        try:
            self.container = self.client.containers.create(
                self.image,
                command=WATCHDOG_COMMAND,
                stdin_open=True,  # with the SDK's default attach settings also StdinOnce: see _watch
                auto_remove=True,  # stopped (its runner gone): removed, with its workspace volume
                init=True,  # docker-init as PID 1 reaps orphans: no zombies eating pids_limit
                user="0:0",
                working_dir="/",
                hostname="sandbox",
                environment={},
                network_mode="none",
                mem_limit=self.memory,
                memswap_limit=self.memory,  # no swap beyond the memory limit
                nano_cpus=int(self.cpus * 1e9),
                pids_limit=self.pids_limit,
                read_only=True,
                tmpfs={
                    CONTAINER_TMP: f"rw,nosuid,nodev,size={self.limits.tmpfs_size},mode=1777",
                    BASELINE_DIR: f"rw,nosuid,nodev,noexec,size={self.limits.tmpfs_size},mode=0700",
                },
                cap_drop=["ALL"],
                # only the trusted grading supervisor runs as root (run_trusted), to start the tests as the sandbox
                # user: every command runs as that user, whose processes hold no capability at all
                cap_add=["SETUID", "SETGID"],
                security_opt=["no-new-privileges"],
                mounts=self._mounts(),
                stop_signal="SIGKILL",
                labels={"org.spectune.sandbox": "docker", OWNER_LABEL: f"{socket.gethostname()}:{owner_token()}"},
            )
            self._watch()  # before start: no moment when the container runs unwatched
            self.container.start()
            with _tar_source(source, self.uid, self.gid) as archive:
                if not self.container.put_archive(WORKSPACE, archive):
                    raise SandboxError(f"copying {source} into the container failed")
        except OSError as e:  # reading the source
            self.close()
            raise SandboxError(f"cannot copy {source} into the sandbox: {e}") from e
        except docker.errors.DockerException as e:
            self.close()
            raise SandboxError(f"cannot start the sandbox container from {self.image}: {e}") from e
        ids = []
        for user, git_dir in ((f"{self.uid}:{self.gid}", False), ("0:0", True)):
            rc, out, _, timed_out = self._exec(
                ["timeout", "600", "bash", "-c", _baseline_script(git_dir)],
                env=git_env(BASELINE_DIR) if git_dir else self.env,
                timeout=600.0,
                limit=DEFAULT_OUTPUT_LIMIT,
                user=user,
            )
            text = out.decode("utf-8", "replace").strip()
            if rc != 0 or timed_out:
                self.close()
                hint = f" (the image's {WORKSPACE} must belong to uid {self.uid})" if "ermission denied" in text else ""
                raise SandboxError(f"git baseline in the container failed ({rc}){hint}: {text[-2000:]}")
            ids.append(text.splitlines()[-1])
        if ids[0] != ids[1]:
            self.close()
            raise SandboxError(f"the two baseline commits differ ({ids[0]} vs {ids[1]})")
        self.baseline = ids[1]

    def _watch(self) -> None:
        """Attach to the main process's stdin and hold the connection: when it closes, the container stops.

        The container is created with `StdinOnce`, so the stdin closes as soon as this client goes,
        whether `close()` closes it or the kernel does because this process ended (even by SIGKILL).
        """
        self._watchdog = self.client.api.attach_socket(self.container.id, params={"stdin": 1, "stream": 1})

    def close(self) -> None:
        """Remove the container and its workspace volume (force). Safe to call twice."""
        container, self.container = self.container, None
        watchdog, self._watchdog = self._watchdog, None
        self._closed = True
        if container is not None:
            _remove(container)
        _close_socket(watchdog)  # after the removal: a stop it caused would race with it

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten sandbox must not leave a container running
        try:
            if self.container is not None:
                self.close()
        except Exception:
            pass

    # -- commands ----------------------------------------------------------------------------

    def _require_started(self) -> None:
        if self.container is None:
            raise SandboxError(
                "the sandbox is closed" if self._closed else "the sandbox is not started (call start(source) first)"
            )
        if self._lost:
            raise SandboxError(
                "the container had to be restarted to stop a command that would not die; its workspace and "
                "baseline (tmpfs) are gone: make a new sandbox"
            )

    def _exec(
        self, argv: list[str], env: dict[str, str], timeout: float, limit: int, user: str | None = None
    ) -> tuple[int | None, bytes, bool, bool]:
        """Run argv in the container from / under `env -i`: (returncode, output, truncated, backstop fired).

        Output is read incrementally by a thread into a bounded capture; if the exec has not
        ended `BACKSTOP_S` after its timeout (+ kill-after), every process of the sandbox user is
        killed from a second exec, and as a last resort the container is restarted.
        """
        import docker.errors
        from docker.utils.socket import frames_iter

        api = self.client.api
        cmd = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        try:
            exec_id = api.exec_create(
                self.container.id,
                cmd,
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
                user=user or f"{self.uid}:{self.gid}",
                workdir="/",
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except docker.errors.DockerException as e:
            raise SandboxError(f"cannot run a command in the sandbox container: {e}") from e
        raw = getattr(sock, "_sock", sock)
        try:
            raw.settimeout(None)  # a silent command is not an error; the deadline below is ours
        except OSError:
            pass
        capture = OutputCapture(limit)
        errors: list[BaseException] = []

        def pump() -> None:
            try:
                for _, data in frames_iter(sock, tty=False):
                    if data:
                        capture.feed(data)
            except BaseException as e:  # reported by the caller's thread
                errors.append(e)

        reader = threading.Thread(target=pump, name="docker-sandbox-output", daemon=True)
        reader.start()
        reader.join(timeout + KILL_AFTER_S + BACKSTOP_S)
        backstop = reader.is_alive()
        if backstop:
            self._kill_user_processes()
            reader.join(5.0)
            if reader.is_alive():  # not even that could run (e.g. no pid left)
                self._restart()
                try:
                    raw.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                reader.join(5.0)
        try:
            sock.close()
        except OSError:
            pass
        returncode: int | None = None
        deadline = time.monotonic() + 5.0
        while True:
            try:
                info = api.exec_inspect(exec_id)
            except docker.errors.DockerException as e:
                raise SandboxError(f"cannot inspect a command in the sandbox container: {e}") from e
            if not info.get("Running"):
                returncode = info.get("ExitCode")
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        if errors and not backstop:
            raise SandboxError(f"reading command output from the container failed: {errors[0]!r}")
        output, truncated = capture.result()
        return returncode, output, truncated, backstop

    def _kill_user_processes(self) -> None:
        """SIGKILL every process of the sandbox user (setsid grandchildren included), from outside."""
        try:
            api = self.client.api
            exec_id = api.exec_create(self.container.id, ["kill", "-KILL", "-1"], user=f"{self.uid}:{self.gid}")["Id"]
            api.exec_start(exec_id)
        except Exception:
            pass

    def _restart(self) -> None:
        """Last resort: restart the container (kills every process; see the module docstring), then watch it again.

        The restart keeps the container (the daemon suspends `auto_remove` for it); its new main
        process reads a new stdin, so the old connection is closed only after a new one is attached.
        """
        self._lost = True  # a restart remounts the tmpfs workspace and baseline empty: nothing after it is valid
        try:
            self.container.restart(timeout=0)
        except Exception:
            return  # the old main process may still run: keep the connection that watches it
        old = self._watchdog
        try:
            self._watch()
        except Exception:
            self._watchdog = old
            return
        _close_socket(old)

    def _prlimit_options(self, timeout: float) -> str:
        """The wrapper's `prlimit` options: the limits' own arguments without the program and the `--`."""
        return " ".join(self.limits.prlimit_args("prlimit", timeout)[1:-1])

    def run(self, command: str, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        """`bash -c command` as the sandbox user in /workspace; the whole process tree dies at timeout."""
        self._require_started()
        if not (isinstance(timeout, int | float) and 0 < timeout < 10**7):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if "\0" in command:  # cannot be an argument at all: the command's own error, not the sandbox's
            return CommandResult(returncode=2, output="sandbox: the command contains a NUL byte\n")
        wrapper = _WRAPPER.format(ws=WORKSPACE, kill=KILL_AFTER_S, bash=self.bash)
        argv = ["bash", "-c", wrapper, "sandbox", f"{timeout:.3f}s", self._prlimit_options(timeout), command]
        started = time.monotonic()
        rc, out, truncated, backstop = self._exec(argv, env=self.env, timeout=timeout, limit=self.limits.output_limit)
        duration = time.monotonic() - started
        # `timeout` exits 124 (SIGTERM did it) or 137 (SIGKILL after the grace period); a command
        # that exits so by itself before its time is not a timeout
        timed_out = backstop or (rc in (124, 137) and duration >= timeout)
        return CommandResult(
            returncode=None if timed_out else rc,
            output=normalize_output(out.decode("utf-8", errors="replace")),
            timed_out=timed_out,
            truncated=truncated,
            duration_s=duration,
        )

    separates_trusted = True  # run_trusted's program runs as root, the commands it starts as the sandbox user

    def run_trusted(self, program: str, job: dict[str, Any], timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        """Run the Python `program` (source, `python -I -c`) in /workspace as root, the container's trusted user.

        It gets `SPECTUNE_CHILD_PREFIX` (JSON argv that runs a program as the sandbox user under the command limits)
        and `SPECTUNE_GRADER_JOB` (JSON `job` plus the command environment as `env`) in its environment and starts
        the untrusted part itself (tasks/grading/supervisor.py). The whole exec ends at `timeout`.
        """
        self._require_started()
        if not (isinstance(timeout, int | float) and 0 < timeout < 10**7):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        prefix = [*self.limits.prlimit_args("prlimit", timeout), *setpriv_args("setpriv", self.uid, self.gid)]
        grader_job = {**job, "env": self.env, "kill_leftovers": True}
        env = {**self.env, "SPECTUNE_CHILD_PREFIX": json.dumps(prefix), "SPECTUNE_GRADER_JOB": json.dumps(grader_job)}
        python = os.path.join(self._venv, "bin", "python")
        script = f'cd {WORKSPACE} || exit 125; exec timeout --kill-after={KILL_AFTER_S}s "$1" {python} -I -c "$2"'
        argv = ["bash", "-c", script, "sandbox", f"{timeout:.3f}s", program]
        started = time.monotonic()
        rc, out, truncated, backstop = self._exec(
            argv, env=env, timeout=timeout, limit=self.limits.output_limit, user="0:0"
        )
        duration = time.monotonic() - started
        self._kill_user_processes()  # nothing the tests started outlives the grading
        timed_out = backstop or (rc in (124, 137) and duration >= timeout)
        return CommandResult(
            returncode=None if timed_out else rc,
            output=out.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            truncated=truncated,
            duration_s=duration,
        )

    def diff(self) -> str:
        """`git add -A` + `git diff --cached` against the baseline, in the root-only baseline repository."""
        self._require_started()
        # at most DIFF_LIMIT + 1 bytes ever leave the container: host memory stays bounded
        diff = _git_cmd("diff", *DIFF_FLAGS, str(self.baseline), git_dir=True)
        script = " && ".join(
            [
                "set -e",
                "exec 2>&1",
                f"cd {WORKSPACE}",
                _git_cmd("add", "-A", git_dir=True),
                f"{{ {diff} | head -c {DIFF_LIMIT + 1}; exit ${{PIPESTATUS[0]}}; }}",
            ]
        )
        rc, out, _, timed_out = self._exec(
            ["timeout", "600", "bash", "-c", script],
            env=git_env(BASELINE_DIR),
            timeout=600.0,
            limit=DIFF_LIMIT + 1,
            user="0:0",
        )
        if len(out) > DIFF_LIMIT:
            raise PatchTooLargeError(f"the workspace diff exceeds {DIFF_LIMIT} bytes (DIFF_LIMIT); nothing was kept")
        text = out.decode("utf-8", errors="replace")
        if rc != 0 or timed_out:
            raise SandboxError(f"git diff in the container failed (exit {rc}): {text[-2000:]}")
        return text


def _close_socket(sock: Any) -> None:
    """Close a hijacked docker connection for real (closing the SDK's wrapper alone leaves it open)."""
    if sock is None:
        return
    raw = getattr(sock, "_sock", None) or sock  # the SDK's SocketIO wrapper drops `_sock` when closed
    for step in (lambda: raw.shutdown(socket.SHUT_RDWR), lambda: raw.close(), lambda: sock.close()):
        try:
            step()
        except Exception:
            pass


def _remove(container: Any) -> None:
    """Force-remove a container and its anonymous volumes; one gone already, or going (auto_remove), is fine."""
    import docker.errors

    deadline = time.monotonic() + REMOVE_WAIT_S
    while True:
        try:
            container.remove(force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as e:
            # 409: the daemon is removing it already (auto_remove, its main process having ended): wait for that
            if e.status_code != 409 or time.monotonic() > deadline:
                return
        except Exception:
            return
        time.sleep(0.1)


_REAPED: set[str] = set()
_REAPED_DIRS: list[bool] = []


def _reap_once(client: Any) -> list[str]:
    """Remove, once per process and daemon, spectune containers (and temp folders) whose owner process is dead."""
    key = str(client.api.base_url)
    if key in _REAPED:
        return []
    _REAPED.add(key)
    if not _REAPED_DIRS:  # the runner's own temp folders (workspaces, evaluations) of dead owners
        _REAPED_DIRS.append(True)
        reap_stale_dirs()
    return reap_stale_containers(client)


def reap_stale_containers(client: Any) -> list[str]:
    """Remove the containers labelled by a spectune process of this host that no longer exists; their names."""
    host = socket.gethostname()
    removed = []
    try:
        containers = client.containers.list(all=True, filters={"label": OWNER_LABEL})
    except Exception:
        return removed
    for container in containers:
        owner_host, _, token = container.labels.get(OWNER_LABEL, "").partition(":")
        if owner_host == host and token and not is_alive(token):
            try:
                container.remove(force=True, v=True)
                removed.append(container.name)
            except Exception:
                pass
    return removed


__all__ = [
    "DEFAULT_IMAGE",
    "GIT_IDENTITY",
    "DockerSandbox",
    "connect",
    "host_python_paths",
    "reap_stale_containers",
    "sandbox_env",
    "strip_pytest_timing",
]
