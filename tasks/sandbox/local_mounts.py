"""The local sandbox's filesystem: an allow-listed root, as the bubblewrap (`bwrap`) options that build it.

bwrap starts every command in a fresh, empty root (a tmpfs) and pivots into it; only what these options put there
exists inside. That is, in order:

- the host's /usr read-only, and /bin, /sbin, /lib, /lib32, /lib64, /libx32 as the host has them (the same symlink
  into /usr, or the directory bound read-only);
- /etc holding only `ETC_HOST` of the host's, read-only (the loader's cache, the alternatives symlinks) and the
  files `write_etc` generates once per sandbox: passwd and group naming root, the command user and nobody, hosts
  (localhost and the sandbox's hostname), nsswitch.conf (files only);
- a fresh /proc (the command's own PID namespace) and a minimal /dev (null, zero, full, random, urandom, tty, a
  private pts);
- a fresh size-capped tmpfs, mode 1777, on each of TMPFS_DIRS (/tmp, /var/tmp, /dev/shm, /run: no host service
  sockets);
- the workspace at /workspace, read-write;
- each host path commands must read (the task interpreter's, `expose_paths`) read-only at its own path, the
  folders on the way to it fresh, empty and 0755 (so /root may hold just the way to the task Python);
- then the root itself is remounted read-only.

Nothing else of the host exists inside: no other checkout, /home, /opt, /srv, /var/lib, /sys or /mnt.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable
from pathlib import Path

from tasks.sandbox.base import WORKSPACE, SandboxError

TMPFS_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # each a private writable tmpfs per command
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_HOST = ("ld.so.cache", "alternatives")  # the loader finds /usr/local/lib; `awk`, `pager`... resolve
ETC_GENERATED = ("passwd", "group", "hosts", "nsswitch.conf")
# Made by the plan itself: a needed host path cannot be one of these, nor lie below one but in a tmpfs dir.
RESERVED = ("/proc", "/dev", WORKSPACE)


def within(path: str, parent: str) -> bool:
    """Whether `path` is `parent` or lies below it (both absolute, normalised)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def outermost(paths: set[str]) -> list[str]:
    """The paths of `paths` that lie below no other of them, sorted."""
    return sorted(p for p in paths if not any(q != p and within(p, q) for q in paths))


def may(st: os.stat_result, uid: int, gid: int, bits: int) -> bool:
    """Whether `uid` (primary group `gid`, no other groups) has all of `bits` (a combination of 4, 2, 1) on `st`."""
    if uid == 0:
        return True
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & bits == bits


def blocked_at(path: str, uid: int, gid: int) -> str | None:
    """The first folder on the host's way to `path` (itself included) that `uid` cannot enter or list."""
    parts = Path(os.path.realpath(path)).parts
    for i in range(1, len(parts) + 1):
        sub = os.path.join(*parts[:i])
        try:
            st = os.stat(sub)
        except OSError:
            return None
        if not may(st, uid, gid, 5 if i == len(parts) else 1):
            return sub
    return None


def plan_exposed(needed: set[str], uid: int, gid: int, warnings: list[str]) -> list[str]:
    """The host paths to bind read-only at their own paths: the outermost of `needed` that /usr does not show.

    Raises SandboxError for a path the sandbox makes itself (a private tmpfs dir, /proc, /etc ...); appends to
    `warnings` for one that is missing or that `uid` cannot read (the folders on the way are the sandbox's own).
    """
    out = set()
    for p in needed:
        if any(within(p, d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)):
            continue  # bound whole already
        below_tmpfs = any(within(p, d) and p != d for d in TMPFS_DIRS)
        if p in ("/", "/etc", *TMPFS_DIRS) or (not below_tmpfs and any(within(p, d) for d in RESERVED)):
            raise SandboxError(
                f"cannot expose {p} itself read-only to sandboxed commands: the sandbox makes it (for each of "
                f"{', '.join(TMPFS_DIRS)} a private writable tmpfs); use a folder below it (for the task "
                "environment: SPECTUNE_TASK_PYTHON_DIR=<a folder>)"
            )
        if not os.path.lexists(p):
            warnings.append(f"{p} does not exist: commands cannot see it")
            continue
        out.add(p)
    exposed = outermost(out)
    for p in exposed:
        if not may(os.stat(p), uid, gid, 5 if os.path.isdir(p) else 4):
            warnings.append(f"{p} is not readable by uid {uid}; change its mode")
    return exposed


def _name(lookup: Callable[[], str], default: str) -> str:
    try:
        return lookup()
    except KeyError:
        return default


def write_etc(folder: Path, uid: int, gid: int, hostname: str) -> None:
    """The generated /etc files (ETC_GENERATED), readable by everyone: fixed text but for the command user's ids."""
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    users = {0: "root", 65534: "nobody"}
    groups = {0: "root", 65534: "nogroup"}
    if uid not in users:  # the command user's name as the host has it (getpass, `id`, `ls -l` print it)
        users[uid] = _name(lambda: pwd.getpwuid(uid).pw_name, f"user{uid}")
    if gid not in groups:
        groups[gid] = _name(lambda: grp.getgrgid(gid).gr_name, f"group{gid}")
    files = {
        "passwd": "".join(
            f"{n}:x:{u}:{gid if u == uid else u}::{'/root' if u == 0 else '/tmp'}:/bin/sh\n"
            for u, n in sorted(users.items())
        ),
        "group": "".join(f"{n}:x:{g}:\n" for g, n in sorted(groups.items())),
        "hosts": f"127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
    }
    for file, text in files.items():
        (folder / file).write_text(text)
        os.chmod(folder / file, 0o644)


def bwrap_mounts(workspace: Path, etc: Path, exposed: list[str], tmpfs_size: int | None) -> list[str]:
    """The bwrap options that build the allow-listed root (see the module docstring), in the order they apply."""
    args = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    # bwrap makes the parents of a mount point 0700: every folder commands walk through is made 0755 first
    made = {"/", "/etc", "/var", "/dev", *TMPFS_DIRS}
    args += ["--perms", "0755", "--dir", "/etc"]
    for f in ETC_GENERATED:
        args += ["--ro-bind", str(etc / f), f"/etc/{f}"]
    for f in ETC_HOST:
        args += ["--ro-bind-try", f"/etc/{f}", f"/etc/{f}"]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "0755", "--dir", "/var"]
    size = [] if tmpfs_size is None else ["--size", str(tmpfs_size)]
    for d in TMPFS_DIRS:
        args += ["--perms", "1777", *size, "--tmpfs", d]
    args += ["--bind", str(workspace), WORKSPACE]
    for p in exposed:
        for parent in reversed(Path(p).parents):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", p, p]
    return [*args, "--remount-ro", "/"]
