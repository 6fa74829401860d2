"""What this machine can run, probed once per process: the CPU's instruction sets, oneDNN's bf16, CUDA.

Why it exists: machines that look alike differ underneath. Two hosts sold as "2-core AMD EPYC" may have
AVX-512 with BF16 or AVX2 alone, and oneDNN's bf16 linear does not fall back on the latter: torch raises
("bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"). So every kernel and
numeric path states what it needs (engine/kernels.py, engine/forward.py), `auto` and the measured plan pick
only what this host runs, and a forced choice it cannot run is refused in one line.

The answer comes from torch itself where it has one (`torch.ops.mkldnn._is_mkldnn_bf16_supported`: the very
check its bf16 kernels make) and the CPU's flags for the rest, read from /proc/cpuinfo. The flags that matter
also key the per-machine plan cache, so a cache copied from another host is not trusted.

`SPECTUNE_CPU_FEATURES=avx2,fma` narrows the probe to those flags (intersected with the real ones: it can
take a feature away, never add one), so an AVX-512 host can run the suite as an AVX2-only host would.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

FEATURES_ENV = "SPECTUNE_CPU_FEATURES"
# The CPU flags spectune's choices depend on (x86 names as /proc/cpuinfo spells them; Arm's `asimd`, `bf16`).
FLAGS_THAT_MATTER = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_bf16",
    "avx_ne_convert",
    "amx_tile",
    "amx_bf16",
    "asimd",
    "bf16",
    "sve",
)
# oneDNN's own bf16 gate (torch's mkldnn_bf16_device_check): all of the first set, or the second, on x86;
# the bf16 extension on Arm.
ONEDNN_BF16_X86 = (frozenset({"avx512bw", "avx512vl", "avx512dq"}), frozenset({"avx_ne_convert"}))
ONEDNN_BF16_ARM = frozenset({"bf16"})
ONEDNN_BF16_NEEDS = "avx512bw + avx512vl + avx512dq, or avx_ne_convert (x86); bf16 (Arm)"
# Flags with which bf16 arithmetic is native (not emulated in fp32): where auto may keep a checkpoint's bf16.
NATIVE_BF16 = frozenset({"avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16"})


@dataclass(frozen=True)
class Host:
    """The probed machine: architecture, CPU model, the flags that matter, and what torch can run on it."""

    arch: str  # platform.machine(): x86_64, aarch64, ...
    cpu: str  # the CPU's model name
    flags: frozenset[str]  # the FLAGS_THAT_MATTER this CPU has (after SPECTUNE_CPU_FEATURES, if set)
    onednn: bool  # torch is built with oneDNN (mkldnn) and can use it here
    onednn_bf16: bool  # oneDNN's bf16 kernels run on this CPU
    cuda: bool  # a CUDA device is visible
    narrowed: bool = False  # SPECTUNE_CPU_FEATURES took features away

    @property
    def bf16_native(self) -> bool:
        """bf16 runs natively here (AVX512-BF16, AMX, AVX-NE-CONVERT, Arm BF16): worth keeping a bf16 checkpoint's."""
        return self.onednn_bf16 and bool(self.flags & NATIVE_BF16)

    def key(self) -> str:
        """What a measurement made on this host depends on (the plan cache's machine part)."""
        narrowed = " narrowed" if self.narrowed else ""
        return f"{self.cpu}|{self.arch}|{','.join(sorted(self.flags))}|onednn-bf16 {self.onednn_bf16}{narrowed}"

    def describe(self) -> str:
        """One line: e.g. "AMD EPYC 9R14 (x86_64): avx2 avx512bw ...; oneDNN bf16 yes; CUDA no"."""
        flags = " ".join(f for f in FLAGS_THAT_MATTER if f in self.flags) or "none of the flags that matter"
        yes = {True: "yes", False: "no"}
        narrowed = f" (narrowed by ${FEATURES_ENV})" if self.narrowed else ""
        return (
            f"{self.cpu} ({self.arch}): {flags}{narrowed}; oneDNN {yes[self.onednn]}, "
            f"oneDNN bf16 {yes[self.onednn_bf16]}; CUDA {yes[self.cuda]}"
        )

    def lacks_for_onednn_bf16(self) -> str:
        """Why oneDNN's bf16 linear cannot run here ("" when it can): the flags it needs and those this CPU has."""
        if self.onednn_bf16:
            return ""
        if not self.onednn:
            return "this torch build has no oneDNN"
        have = " ".join(f for f in FLAGS_THAT_MATTER if f in self.flags) or "none of them"
        return f"oneDNN's bf16 linear needs {ONEDNN_BF16_NEEDS}; this CPU has {have}"


def onednn_bf16_by_flags(arch: str, flags: frozenset[str]) -> bool:
    """oneDNN's bf16 gate applied to a set of flags (what torch answers for a CPU that has exactly those)."""
    if arch in ("aarch64", "arm64"):
        return ONEDNN_BF16_ARM <= flags
    return any(need <= flags for need in ONEDNN_BF16_X86)


def cpu_flags(text: str | None = None) -> tuple[str, frozenset[str]]:
    """(model name, the FLAGS_THAT_MATTER present) from /proc/cpuinfo's text (read when not given)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            text = ""
    name, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "features"):  # x86 says flags, Arm says Features
            flags |= set(value.split())
    return name or platform.processor() or platform.machine(), frozenset(flags) & frozenset(FLAGS_THAT_MATTER)


def _onednn() -> tuple[bool, bool]:
    """(torch has oneDNN, its bf16 kernels run here), as torch's own checks answer."""
    if not torch.backends.mkldnn.is_available():
        return False, False
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return True, bool(check()) if check is not None else False
    except RuntimeError:
        return True, False


@functools.cache
def probe() -> Host:
    """This machine, once per process (narrowed by $SPECTUNE_CPU_FEATURES when set)."""
    arch = platform.machine().lower()
    name, flags = cpu_flags()
    onednn, onednn_bf16 = _onednn()
    narrowed = False
    wanted = os.environ.get(FEATURES_ENV, "").strip()
    if wanted:
        asked = frozenset(f.strip().lower() for f in wanted.replace(" ", ",").split(",") if f.strip())
        narrowed = not flags <= asked
        flags &= asked
        onednn_bf16 = onednn_bf16 and onednn_bf16_by_flags(arch, flags)
    cuda = torch.cuda.is_available()
    return Host(arch, name, flags, onednn, onednn_bf16, cuda, narrowed)
