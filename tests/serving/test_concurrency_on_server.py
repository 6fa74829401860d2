"""Several agents at once on the real llama-server: one server with a slot per agent, figures per request.

The runner at run.concurrency=2 starts each side's server with `-np 2 --kv-unified` and a pool of twice the
context, each agent's requests go to its own slot, and a request's figures come from its reply and its slot's
log lines (the /metrics counters move for both slots): they must agree, add up to the side's totals, and show
ON drafting. No server outlives the run. Needs the binary (tests/serving/conftest.py).
"""

from __future__ import annotations

import json

from runners.run import execute
from tests.serving.conftest import server_pids


def test_two_agents_share_one_server_with_a_slot_each(binary, ggufs, runner_cfg, tmp_path):
    cfg = runner_cfg(
        "task.split=dev",
        "task.limit=3",
        "engine=ngram",
        "engine.backend=llama-server",
        f"server.target_gguf={ggufs['target']}",
        "run.concurrency=2",
        "run.warmup=false",
        "run.name=np2",
        "run.threads=1",
        "tracking.enabled=false",
    )
    summary = execute(cfg)
    for side in ("baseline", "candidate"):
        described = summary["backend"][side]
        assert described["args"][-3:] == ["-np", "2", "--kv-unified"] and described["concurrency"] == 2
        assert summary[side]["tasks"] == 3 and summary[side]["statuses"].get("error", 0) == 0
        runs = [json.loads(x) for x in (tmp_path / "np2" / "repeats.jsonl").read_text().splitlines()]
        mine = [r for r in runs if r["side"] == side]
        assert sum(r["stats"]["new_tokens"] for r in mine) == summary[side]["new_tokens"]
        assert sum(r["stats"]["drafted"] for r in mine) == sum(summary[side]["per_position"]["drafted"])
    assert summary["candidate"]["acceptance_rate"] > 0
    assert summary["concurrency"]["agents"] == 2 and summary["concurrency"]["throughput_ratio"] is not None
    assert summary["diverged_tasks"] == []
    assert server_pids(str(ggufs["target"])) == [], "a llama-server outlived the run"
