"""`spectune.yaml`: the composed runner config, rerunnable with `python -m runners.run`."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from common.files import write_atomic
from export.record import ExportRecord

FILE = "spectune.yaml"
CONFIG_NAME = "spectune"
# The saved config is already composed, so it is the primary config with no defaults list. These
# overrides restore what conf/config.yaml sets for Hydra itself: run folder runs/<run.name>, no
# .hydra/ subfolder (the runner saves the config itself), no Hydra log files, no chdir.
HYDRA_OVERRIDES = (
    "hydra.run.dir=${run.root}/${run.name}",
    "hydra.output_subdir=null",
    "hydra.job.chdir=false",
    "hydra/job_logging=none",
    "hydra/hydra_logging=none",
)


def rerun_command(folder: str) -> str:
    """The shell command that reruns the saved config from `folder`."""
    overrides = " ".join(f"'{o}'" if "$" in o else o for o in HYDRA_OVERRIDES)
    return f"python -m runners.run --config-path {folder} --config-name {CONFIG_NAME} {overrides}"


def render(record: ExportRecord, folder: Path) -> str:
    """The YAML text: a comment header, then composed_config exactly."""
    # OmegaConf's dumper quotes strings its own loader would read as another type ("1e5", "null"), so the
    # file loads back into the same values under both OmegaConf (Hydra) and PyYAML.
    body = OmegaConf.to_yaml(OmegaConf.create(record.composed_config), sort_keys=False)
    header = [
        "# spectune: the composed `python -m runners.run` config of the exported configuration.",
        "# Rerun it from the spectune checkout (relative paths such as run.root and model paths resolve there):",
        f"#   {rerun_command(str(folder.resolve()))}",
        "# Any key can be overridden on that command line, e.g. run.name=again run.repeats=1",
        "# (a run.name that exists already needs run.resume=true or run.overwrite=true).",
    ]
    return "\n".join(header) + "\n" + body


def write(out_dir: Path, record: ExportRecord, final_dir: Path | None = None) -> Path:
    """Write spectune.yaml into out_dir; its rerun command names `final_dir`, where the folder will live (default:
    out_dir itself; a study writes best/ beside and swaps it in, so the command must name best/, not the draft)."""
    path = out_dir / FILE
    write_atomic(path, render(record, final_dir or out_dir))
    return path
