"""Runner defaults: `task.limit=N` takes N tasks spread over the split (the README's 5 tasks: 5 projects)."""

from runners.config import TaskConf
from tasks.suites import load_suite
from tests.conftest import compose_config


def test_default_subset_is_spread_so_five_tasks_cover_five_projects():
    assert TaskConf().subset == "spread"
    cfg = compose_config("config", "task=swe-lite", "task.split=dev", "task.limit=5", "run.name=x")
    assert cfg.task.subset == "spread"
    instances = load_suite(cfg.task.name, cfg.task.split, cfg.task.limit, None, cfg.task.path, cfg.task.subset)
    assert len({i.repo for i in instances}) == 5
    first = load_suite("swe-lite", "dev", 5, subset="first")  # the old default: one project
    assert len({i.repo for i in first}) < 5
