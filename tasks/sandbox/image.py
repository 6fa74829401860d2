"""The docker sandbox's image: a plain Debian bookworm root filesystem with git and procps.

Nothing Python-specific is installed: the docker sandbox bind-mounts the host's own Python
installation (and virtual environment) read-only at the same paths, so commands inside run the
very same interpreter and packages as the host. The image only has to be the same OS as the host
(Debian bookworm) with the shared libraries that interpreter's extension modules link against.

Two ways to build it (`python -m tasks.sandbox build-image`):

* `--dockerfile`: `docker build` of `tasks/sandbox/Dockerfile` (FROM debian:bookworm-slim), for
  machines that can pull from Docker Hub.
* `--offline`: no registry needed, only a Debian package mirror: `debootstrap --variant=minbase`
  into a cached root filesystem (~/.cache/spectune/rootfs), then `docker import` of its tarball.
  The default when Docker Hub cannot be reached within a few seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from common.cache import cache_root

DEFAULT_TAG = "spectune-sandbox:latest"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DOCKERFILE = Path(__file__).with_name("Dockerfile")
CACHE_DIR = cache_root("rootfs")
REGISTRY = ("registry-1.docker.io", 443)

# Tools the sandbox itself needs (git for the baseline and diff(), procps for ps/pgrep/pkill) and
# a few an agent expects; `coreutils` (timeout), `bash`, `util-linux` (setsid) are essential.
TOOLS = ("git", "procps", "ca-certificates", "patch", "xz-utils")
# Shared libraries a CPython build's extension modules link against (ssl, ctypes, sqlite3, bz2,
# lzma, zlib, expat, readline, curses, uuid, dbm, crypt). Detected ones are added to these.
PYTHON_LIBS = (
    "libssl3",
    "libffi8",
    "libsqlite3-0",
    "libbz2-1.0",
    "liblzma5",
    "zlib1g",
    "libexpat1",
    "libreadline8",
    "libncursesw6",
    "libuuid1",
    "libgdbm6",
    "libnsl2",
    "libcrypt1",
)
# Extension modules whose libraries are not worth an image (a GUI toolkit pulls in X11).
SKIP_MODULES = ("_tkinter",)

Log = Callable[[str], None]


def _print(line: str) -> None:
    print(f"[build-image] {line}", flush=True)


def python_library_packages(log: Log | None = None) -> list[str]:
    """Debian packages holding the shared libraries the host's Python links against.

    `ldd` of the interpreter, libpython and lib-dynload's modules, mapped to packages with
    `dpkg -S`. Empty (not an error) on a host without ldd or dpkg.
    """
    if not (shutil.which("ldd") and shutil.which("dpkg")):
        return []
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    targets = [os.path.realpath(sys.executable)]
    targets += [str(p) for p in sorted((base / "lib").glob("libpython*.so*"))]
    dynload = base / "lib" / version / "lib-dynload"
    targets += [str(p) for p in sorted(dynload.glob("*.so")) if not p.name.startswith(SKIP_MODULES)]
    try:
        out = subprocess.run(["ldd", *targets], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    libs = sorted({m.group(1) for m in re.finditer(r"=>\s+(/\S+)", out)})
    packages: set[str] = set()
    for lib in libs:
        if lib.startswith(str(base)) or lib.startswith(sys.prefix):
            continue  # part of the mounted installation itself
        candidates = [lib, os.path.realpath(lib)]
        candidates += [c[len("/usr") :] for c in candidates if c.startswith("/usr/")]
        candidates += ["/usr" + c for c in candidates if not c.startswith("/usr/")]
        for candidate in dict.fromkeys(candidates):
            found = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True).stdout
            if found:
                packages.update(line.split(":", 1)[0] for line in found.splitlines() if ":" in line)
                break
        else:
            if log:
                log(f"no Debian package holds {lib} (the mounted Python may miss it)")
    return sorted(packages)


def image_packages(log: Log | None = None) -> list[str]:
    """Every package the image gets beyond debootstrap's minbase (sorted, de-duplicated)."""
    return sorted({*TOOLS, *PYTHON_LIBS, *python_library_packages(log)})


def apt_mirror(suite: str = SUITE) -> str:
    """The Debian mirror this host's apt uses for `suite` (deb822 or one-line sources), else the default."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, v in (line.split(":", 1) for line in stanza.splitlines() if ":" in line and line[0] != "#")
                )
                suites = fields.get("suites", "").split()
                if suite in suites and "deb" in fields.get("types", "").split():
                    for uri in fields.get("uris", "").split():
                        if uri.rstrip("/").endswith("/debian"):
                            return uri.rstrip("/")
        else:
            for line in text.splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line).split()
                if (
                    len(parts) >= 3
                    and parts[0] == "deb"
                    and parts[2] == suite
                    and parts[1].rstrip("/").endswith("/debian")
                ):
                    return parts[1].rstrip("/")
    return DEFAULT_MIRROR


def registry_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to Docker Hub's registry opens within `timeout` seconds."""
    try:
        with socket.create_connection(REGISTRY, timeout=timeout):
            return True
    except OSError:
        return False


def _rootfs_key(packages: Iterable[str], mirror: str) -> str:
    spec = "\n".join([SUITE, mirror, "minbase", *sorted(packages)])
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def debootstrap_rootfs(packages: list[str], mirror: str, log: Log = _print, cache_dir: Path = CACHE_DIR) -> Path:
    """A cached minbase root filesystem with `packages`, built by debootstrap on first use."""
    rootfs = cache_dir / f"{SUITE}-{_rootfs_key(packages, mirror)}"
    if (rootfs / ".spectune-complete").exists():
        log(f"using cached root filesystem {rootfs}")
        return rootfs
    debootstrap = shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if debootstrap is None:
        raise RuntimeError("debootstrap is not installed: apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise RuntimeError("debootstrap needs root (run build-image as root, or use --dockerfile)")
    partial = rootfs.with_name(rootfs.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    cmd = [debootstrap, "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(partial), mirror]
    log(f"debootstrap {SUITE} from {mirror} with {len(packages)} extra packages (a few minutes) ...")
    started = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        tail: list[str] = []
        for line in proc.stdout:
            line = line.rstrip()
            tail = [*tail[-30:], line]
            if line.startswith(("I: Retrieving", "I: Validating", "I: Configuring", "I: Unpacking")):
                continue  # one line per package: too many
            log(f"  {line}")
        if proc.wait() != 0:
            raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n" + "\n".join(tail))
    log(f"debootstrap done in {time.monotonic() - started:.0f}s")
    partial.rename(rootfs)
    (rootfs / ".spectune-complete").write_text("\n".join(packages) + "\n")
    return rootfs


# Bump when _finish_rootfs changes: names the cached tarball.
FINISH_VERSION = 3
SANDBOX_UID = 65534  # owner of /workspace (the docker sandbox's default user)


def _finish_rootfs(rootfs: Path) -> None:
    """Trim caches; let the sandbox user reach host paths mounted under /root and own /workspace.

    /workspace is the mount point of each container's workspace volume, which starts as a copy
    of it: owned by the sandbox user (a put_archive cannot change the owner of the volume's top
    directory, and the container's root has no CAP_CHOWN). Idempotent.
    """
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / sub).glob("*"):
            if entry.is_file():
                entry.unlink()
    for sub in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale"):
        path = rootfs / sub
        if path.is_dir():
            shutil.rmtree(path)
            path.mkdir()
    # The host Python may live under /root (pyenv): the sandbox user must be able to traverse it.
    (rootfs / "root").chmod(0o711)
    workspace = rootfs / "workspace"
    workspace.mkdir(exist_ok=True)
    os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
    workspace.chmod(0o755)


def rootfs_tarball(rootfs: Path, log: Log = _print) -> Path:
    """A tar of the root filesystem next to it (cached), for `docker import`."""
    tarball = rootfs.with_name(f"{rootfs.name}-v{FINISH_VERSION}.tar")
    if tarball.exists():
        return tarball
    for stale in rootfs.parent.glob(f"{rootfs.name}*.tar"):
        stale.unlink()
    _finish_rootfs(rootfs)
    log(f"packing {rootfs} ...")
    partial = tarball.with_name(tarball.name + ".partial")
    exclude = ["--exclude=./.spectune-complete"]
    subprocess.run(["tar", "--numeric-owner", *exclude, "-C", str(rootfs), "-cf", str(partial), "."], check=True)
    partial.rename(tarball)
    return tarball


def import_rootfs(client, tarball: Path, tag: str, packages: list[str], log: Log = _print) -> str:
    """`docker import` the tarball as `tag`; returns the image id."""
    repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
    changes = [
        'CMD ["sleep", "infinity"]',
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "WORKDIR /workspace",
        f"LABEL org.spectune.sandbox.packages={','.join(packages)}",
        "LABEL org.spectune.sandbox.built-by=debootstrap",
    ]
    previous = client.images.get(tag).id if image_exists(client, tag) else None
    log(f"docker import {tarball.name} ({tarball.stat().st_size / 2**20:.0f} MiB) as {tag} ...")
    client.api.import_image_from_file(str(tarball), repository=repository, tag=version or "latest", changes=changes)
    image = client.images.get(tag)
    _drop_replaced(client, previous, image.id, log)
    return image.id


def _drop_replaced(client, previous: str | None, current: str, log: Log) -> None:
    """Remove the image `tag` named before a rebuild, unless a container still uses it."""
    import docker.errors

    if previous and previous != current:
        try:
            client.images.remove(previous)
            log(f"removed the previous image {previous[:19]}")
        except docker.errors.APIError:
            pass


def build_offline(client, tag: str = DEFAULT_TAG, log: Log = _print, mirror: str | None = None) -> str:
    """debootstrap (cached) + docker import. Returns the image id."""
    mirror = mirror or apt_mirror()
    packages = image_packages(log)
    rootfs = debootstrap_rootfs(packages, mirror, log)
    tarball = rootfs_tarball(rootfs, log)
    return import_rootfs(client, tarball, tag, packages, log)


def build_dockerfile(client, tag: str = DEFAULT_TAG, log: Log = _print) -> str:
    """`docker build` of tasks/sandbox/Dockerfile, with the detected library packages as a build arg."""
    extra = [p for p in image_packages(log) if p not in TOOLS]
    previous = client.images.get(tag).id if image_exists(client, tag) else None
    log(f"docker build -f {DOCKERFILE} -t {tag} ...")
    image_id = None
    for chunk in client.api.build(
        path=str(DOCKERFILE.parent),
        dockerfile=DOCKERFILE.name,
        tag=tag,
        buildargs={"EXTRA_PACKAGES": " ".join(extra)},
        rm=True,
        decode=True,
    ):
        if "stream" in chunk and chunk["stream"].strip():
            log("  " + chunk["stream"].rstrip())
        if "error" in chunk:
            raise RuntimeError(f"docker build failed: {chunk['error'].strip()}")
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    image_id = image_id or client.images.get(tag).id
    _drop_replaced(client, previous, image_id, log)
    return image_id


def build_image(client, tag: str = DEFAULT_TAG, mode: str = "auto", log: Log = _print) -> str:
    """Build the sandbox image: mode 'dockerfile', 'offline', or 'auto' (offline unless Docker Hub answers)."""
    started = time.monotonic()
    if mode == "auto":
        mode = "dockerfile" if registry_reachable() else "offline"
        log(f"Docker Hub {'reachable' if mode == 'dockerfile' else 'unreachable'}: building {mode}")
    image_id = build_dockerfile(client, tag, log) if mode == "dockerfile" else build_offline(client, tag, log)
    size = client.images.get(tag).attrs.get("Size", 0)
    log(f"built {tag} ({image_id[:19]}, {size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f}s")
    return image_id


def image_exists(client, tag: str = DEFAULT_TAG) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


__all__ = [
    "CACHE_DIR",
    "DEFAULT_TAG",
    "DOCKERFILE",
    "apt_mirror",
    "build_image",
    "build_offline",
    "image_exists",
    "image_packages",
    "python_library_packages",
    "registry_reachable",
]
