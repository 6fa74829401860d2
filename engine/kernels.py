"""The linear kernels a forward runs on, what each needs from the machine, and the plan of which serves which size.

A kernel computes x W^T + b for one linear: `torch` (F.linear over the model's own tensors, MKL / cuBLAS),
`onednn` (oneDNN's linear over weights packed once; CPU, fp32 / bf16, and bf16 only where the CPU has what
oneDNN's bf16 path needs: engine/host.py), `transposed` (a matmul over a copy of W stored [in, out]). A plan
(`LinearPlan`) says, per group of linears (decoder layers, LM head), which kernel serves a call of so many fed
rows; engine/forward_plan.py measures one, engine/llama.py runs it. This is the leaf both import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from common.errors import ConfigError, UnsupportedConfig
from engine.host import Host, probe

MAX_ROWS = 8  # verification sizes a plan covers: gamma + 1 up to 8

ONEDNN_DTYPES = (torch.float32, torch.bfloat16)  # what oneDNN's packed linear runs on CPU
Linear = Callable[[torch.Tensor], torch.Tensor]  # x [n, in] -> x W^T + b [n, out]


def torch_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
    """F.linear over the weights as they are (MKL / cuBLAS): the reference kernel."""
    return lambda x: F.linear(x, weight, bias)


def onednn_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
    """oneDNN's linear over a weight reordered once into its blocked layout (CPU, fp32 / bf16)."""
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 8)  # layout chosen for up to 8 rows: a verify step
    return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def transposed_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
    """x W^T as a plain matmul over a copy of W stored [in, out] (contiguous), on any device and dtype.

    Why: over weights it must stream from memory (a decode step's), MKL's GEMM in this layout costs about
    the same for 1 to 8 rows, where F.linear over [out, in] steps up at 4 and 7 rows (measured on this
    project's CPU, fp32, each weight cache-cold: a 704 x 256 linear 27 us for 1 row and 29 for 5 here,
    against 27 and 36 through F.linear; the 8192 x 256 LM head 301 and 332 us against 308 and 605).
    """
    stored = weight.t().contiguous()  # [in, out]
    if bias is None:
        return lambda x: x @ stored
    return lambda x: torch.addmm(bias, x, stored)


KERNELS: dict[str, Callable[[torch.Tensor, torch.Tensor | None], Linear]] = {
    "torch": torch_linear,
    "onednn": onednn_linear,
    "transposed": transposed_linear,
}
COPYING_KERNELS = ("onednn", "transposed")  # kernels that hold their own copy of the weights


def kernel_refusal(kernel: str, device: str, dtype: torch.dtype, host: Host | None = None) -> str | None:
    """None when `kernel` runs weights of `dtype` on `device` here, else why not (one line, the missing feature)."""
    if kernel not in KERNELS:
        raise ConfigError(f"unknown linear kernel {kernel!r}; allowed: {', '.join(KERNELS)}")
    if kernel != "onednn":
        return None  # F.linear and a plain matmul run every dtype on every device torch has
    host = host or probe()
    name = str(dtype).removeprefix("torch.")
    if device != "cpu":
        return f"oneDNN's linear runs on the CPU, not on {device}"
    if not host.onednn:
        return "this torch build has no oneDNN (mkldnn)"
    if dtype not in ONEDNN_DTYPES:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in ONEDNN_DTYPES)
        return f"oneDNN's linear runs {allowed}, not {name}"
    if dtype == torch.bfloat16 and not host.onednn_bf16:
        return host.lacks_for_onednn_bf16()
    return None


def make_linear(kernel: str, weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
    """`kernel`'s linear over `weight` (and `bias`); ValueError, one line, where this machine cannot run it."""
    refusal = kernel_refusal(kernel, weight.device.type, weight.dtype)
    if refusal is not None:
        raise UnsupportedConfig(f"linear kernel {kernel!r}: {refusal}")
    return KERNELS[kernel](weight, bias)


_SHORT = {"torch": "F.linear", "onednn": "oneDNN", "transposed": "matmul over [in, out] weights"}


@dataclass(frozen=True)
class GroupPlan:
    """The kernels of one group of linears: `single` below `from_rows` rows, `many` from there on."""

    single: str
    many: str
    from_rows: int  # 2..MAX_ROWS (only used when many != single)

    def kernel(self, rows: int) -> str:
        """The kernel a call over `rows` rows runs on."""
        return self.many if rows >= self.from_rows else self.single

    @property
    def uniform(self) -> bool:
        """One kernel for every size."""
        return self.single == self.many

    def describe(self) -> str:
        """e.g. "F.linear below 3 rows, oneDNN from 3"."""
        if self.uniform:
            return _SHORT[self.single]
        return f"{_SHORT[self.single]} below {self.from_rows} rows, {_SHORT[self.many]} from {self.from_rows}"


@dataclass(frozen=True)
class LinearPlan:
    """Per group of linears, the kernel by fed rows."""

    layers: GroupPlan
    head: GroupPlan
    note: str = ""  # set when no measurement made this plan: why (e.g. the measurement's time cap)

    @classmethod
    def uniform(cls, kernel: str, note: str = "") -> LinearPlan:
        """Every linear on `kernel` at every size (the torch and onednn paths)."""
        one = GroupPlan(kernel, kernel, MAX_ROWS + 1)
        return cls(one, one, note)

    def kernels(self) -> set[str]:
        """Every kernel some call may run on."""
        return {g.single for g in (self.layers, self.head)} | {g.many for g in (self.layers, self.head)}

    @property
    def mixed(self) -> bool:
        """True when a call's size or group decides its kernel."""
        return len(self.kernels()) > 1

    def describe(self) -> str:
        """e.g. "layers F.linear; LM head F.linear below 3 rows, oneDNN from 3"."""
        return f"layers {self.layers.describe()}; LM head {self.head.describe()}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinearPlan:
        """Inverse of to_dict; ValueError on anything else."""
        try:
            plan = cls(GroupPlan(**data["layers"]), GroupPlan(**data["head"]), str(data.get("note", "")))
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a forward plan: {exc}") from None
        if not plan.kernels() <= set(KERNELS):
            raise ConfigError(f"unknown kernel in plan {sorted(plan.kernels())}; allowed: {list(KERNELS)}")
        return plan


class Switch:
    """From how many fed rows a group of linears runs its `many` kernel (the plan measurement moves it)."""

    def __init__(self, from_rows: int) -> None:
        self.from_rows = from_rows


def by_rows(plan: GroupPlan, make: Callable[[str], Callable], switch: Switch) -> Callable:
    """A call that runs `make(kernel)`'s result for the kernel `plan` (and `switch`) gives its input's row count."""
    if plan.uniform:
        return make(plan.single)
    single, many = make(plan.single), make(plan.many)
    return lambda x: many(x) if x.shape[0] >= switch.from_rows else single(x)
