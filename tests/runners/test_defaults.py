"""Runner defaults: `task.limit=N` takes N tasks spread over the split (the README's 5 tasks: 5 projects)."""

from pathlib import Path

from hydra import compose, initialize_config_dir

from runners.config import TaskConf, register_configs
from tasks.suites import load_suite

CONF = str(Path(__file__).resolve().parents[2] / "conf")
register_configs()


def test_default_subset_is_spread_so_five_tasks_cover_five_projects():
    assert TaskConf().subset == "spread"
    with initialize_config_dir(config_dir=CONF, version_base=None):
        cfg = compose("config", overrides=["task=swe-lite", "task.split=dev", "task.limit=5", "run.name=x"])
    assert cfg.task.subset == "spread"
    instances = load_suite(cfg.task.name, cfg.task.split, cfg.task.limit, None, cfg.task.path, cfg.task.subset)
    assert len({i.repo for i in instances}) == 5
    first = load_suite("swe-lite", "dev", 5, subset="first")  # the old default: one project
    assert len({i.repo for i in first}) < 5
