"""Probes: what the driver runs under the checks' interpreter (`python -m bench.gpu_check --env-probe`, ...), each
printing JSON. They import torch and the project inside the function: the driver itself runs on the machine's bare
python3, before anything is installed."""

from __future__ import annotations

import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.gpu_check import MODELS, REPO


def env_probe() -> dict[str, Any]:
    """Run under the checks' interpreter: python, torch and its CUDA, the GPU torch sees, transformers."""
    out: dict[str, Any] = {"python": f"{sys.executable} {platform.python_version()}"}
    import torch

    out.update(torch=torch.__version__, torch_path=str(Path(torch.__file__).parent), cuda=torch.version.cuda)
    out["cuda_available"] = torch.cuda.is_available()
    if out["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cudnn=torch.backends.cudnn.version(),
        )
    for name in ("transformers", "tokenizers", "huggingface_hub", "datasets", "optuna", "hydra"):
        try:
            module = __import__(name)
            out[name] = f"{getattr(module, '__version__', '?')} ({Path(module.__file__).parent.parent})"
        except Exception as exc:  # any import failure is a finding, not a crash of the probe
            out[name] = f"unavailable: {type(exc).__name__}: {exc}"[:300]
    return out


def sandbox_probe() -> dict[str, Any]:
    """Whether the local sandbox runs a command here (the expert behind bench's swe-lite prompts and the tuner's
    agent need it)."""
    from tasks.sandbox import make_sandbox

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "probe.txt").write_text("probe\n")
        box = make_sandbox("local")
        try:
            box.start(Path(tmp))
            ran = box.run("cat probe.txt && python -c 'print(6 * 7)'", timeout=60)
        finally:
            box.close()
    return {"ok": ran.ok, "returncode": ran.returncode, "output": ran.output[-500:]}


def llama_probe() -> dict[str, Any]:
    """Run under the checks' interpreter: the llama-server spectune finds, its backend, the devices it lists."""
    from serving.llama_binary import devices_backend, find_llama_server

    found = find_llama_server()
    listed = subprocess.run([str(found.path), "--list-devices"], capture_output=True, text=True, timeout=60)
    text = listed.stdout + listed.stderr
    devices = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    return {"binary": found.describe(), "backend": found.backend, "listed": devices_backend(text), "devices": devices}


def memory_probe(device: str, dtype: str, contexts: list[int], new_tokens: int = 32) -> dict[str, Any]:
    """The memory model's estimate beside the measured allocator peak, plain and draft_model, at each context."""
    import gc

    import torch

    from engine.engine import Engine, EngineConfig
    from engine.kv import kv_tensors
    from engine.loading import load_model
    from engine.memory import estimate_memory, kv_bytes_for, model_shape

    target_dir, draft_dir = str(REPO / MODELS / "target"), str(REPO / MODELS / "draft")
    cuda = device.startswith("cuda")
    dev = torch.device(device)

    def allocated() -> int:
        return torch.cuda.memory_allocated(dev) if cuda else 0

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    base = allocated()
    target = load_model(target_dir, device=device, dtype=dtype)
    draft = load_model(draft_dir, device=device, dtype=dtype)
    shapes = {"target": model_shape(target_dir), "draft": model_shape(draft_dir)}
    weights = sum(p.numel() * p.element_size() for m in (target, draft) for p in m.model.parameters())
    vocab = int(target.model.config.vocab_size)
    rows, runtime = [], None
    for case, gamma in (("none", 0), ("draft_model", 4)):
        config = EngineConfig(drafter=case, gamma=gamma) if gamma else EngineConfig(drafter=case)
        engine = Engine(target, config, draft=draft if gamma else None)
        engine.generate([5, 17, 300, 42, 9], 8, stop_tokens=frozenset())  # warm-up: workspaces stay allocated
        gc.collect()
        if runtime is None:  # fixed allocations beyond the weights (rotary buffers, cuBLAS workspace)
            runtime = max(allocated() - base - weights, 0)
        for context in contexts:
            prompt = [(i * 7919 + 13) % vocab for i in range(context)]  # fixed ids: memory does not depend on them
            session = engine.new_session()
            if cuda:
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            engine.generate(prompt, new_tokens, session=session, stop_tokens=frozenset())
            if cuda:
                torch.cuda.synchronize(dev)
            peak = torch.cuda.max_memory_allocated(dev) - base if cuda else None
            caches = {"target": session.cache}
            if gamma and getattr(session.drafter, "_cache", None) is not None:
                caches["draft"] = session.drafter._cache  # the draft model's own cache (engine/drafters/draft_model.py)
            reserved = max(
                sum(t.untyped_storage().nbytes() for pair in kv_tensors(c) for t in pair)
                // kv_bytes_for(shapes[name], 1, dtype)
                for name, c in caches.items()
            )
            del caches, session  # the next measurement's peak must not hold this session's caches
            gc.collect()
            kwargs = {"dtype": dtype, "gamma": gamma, "overhead_bytes": runtime, "prefill_tokens": context}
            if gamma:
                kwargs["draft"] = shapes["draft"]
            used = estimate_memory(shapes["target"], context=context + new_tokens, **kwargs)
            held = estimate_memory(shapes["target"], context=reserved, **kwargs)
            rows.append(
                {
                    "drafter": case,
                    "gamma": gamma,
                    "context": context,
                    "new_tokens": new_tokens,
                    "measured_peak_bytes": peak,
                    "estimate_bytes": used.total,  # at the tokens the session holds (what the tuner asks)
                    "estimate_at_reservation_bytes": held.total,  # at the positions its caches reserved
                    "reserved_positions": reserved,
                    "peak_over_estimate": round(peak / used.total, 3) if peak is not None else None,
                    "peak_within_estimate_at_reservation": peak <= held.total if peak is not None else None,
                    "estimate_parts": used.as_dict(),
                }
            )
        del engine
        gc.collect()
    return {
        "device": str(dev),
        "dtype": dtype,
        "forward": target.forward.choice.describe(),
        "weights_bytes": weights,
        "runtime_overhead_bytes": runtime,
        "rows": rows,
    }
