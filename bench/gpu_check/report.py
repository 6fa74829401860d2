"""The report: machine, source, set-up and every step's result grouped by part (gpu_check.json), and its short
markdown reading (gpu_check.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common.files import write_atomic

REPORT, MARKDOWN, LOG = "gpu_check.json", "gpu_check.md", "gpu_check.log"


def overall_status(steps: list[dict[str, Any]]) -> str:
    """ok when every check passed; otherwise failed (skips by budget count as failures: a check did not run)."""
    return "ok" if steps and all(s["status"] == "ok" for s in steps) else "failed"


def assemble_report(
    *,
    started: str,
    wall_s: float,
    budget_s: float,
    device: str,
    machine: dict[str, Any],
    source: dict[str, Any],
    setup: dict[str, Any],
    results: list[dict[str, Any]],
    environment: dict[str, Any] | None = None,
    finished: bool = True,
) -> dict[str, Any]:
    """The report: machine, source, set-up and every step's result grouped by part, with the markdown.

    `finished` False: written while checks still run (status `running`).
    """
    setup_steps = [r for r in results if r["part"] == "setup"]
    probe_steps = [r for r in results if r["part"] == "env"]
    parts: dict[str, dict[str, Any]] = {}
    for r in results:
        if r["part"] in ("setup", "env"):
            continue
        part = parts.setdefault(r["part"], {"steps": []})
        part["steps"].append(r)
    for part in parts.values():
        part["status"] = overall_status(part["steps"])
        part["wall_s"] = round(sum(s.get("wall_s") or 0 for s in part["steps"]), 1)
    report = {
        "tool": "python -m bench.gpu_check",
        "started": started,
        "wall_s": round(wall_s, 1),
        "budget_s": budget_s,
        "device": device,
        "status": overall_status([r for r in results if r["part"] not in ("setup", "env")]) if finished else "running",
        "machine": machine,
        "source": source,
        "setup": {**setup, "steps": setup_steps},
        "environment": {**(environment or {}), "steps": probe_steps},
        "parts": parts,
    }
    report["markdown"] = render_markdown(report)
    return report


def _f(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(report: dict[str, Any]) -> str:
    """A short human reading of the report: what ran where, one line per step, the key figures per part."""
    m, src, env = report["machine"], report["source"], report.get("environment") or {}
    changed = f" (+{src['git_changed_files']} changed files)" if src.get("git_changed_files") else ""
    gpus = "; ".join(f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory')})" for g in m.get("gpus") or [])
    lines = [
        f"# spectune GPU check: {report['status']}",
        "",
        f"- started {report['started']}, wall {report['wall_s']:.0f} s of a {report['budget_s']:.0f} s budget,"
        f" device `{report['device']}`",
        f"- GPU: {gpus or 'none listed by nvidia-smi'}",
        f"- torch {env.get('torch', '?')} (CUDA {env.get('cuda', '?')}),"
        f" transformers {str(env.get('transformers', '?')).split(' (')[0]}, python {env.get('python', '?')}",
        f"- source: commit {src.get('git_commit') or src.get('commit_given') or 'unknown'}{changed},"
        f" fingerprint {src.get('fingerprint')}",
        f"- set-up: {report['setup'].get('mode', '?')}: {report['setup'].get('note', '')}",
        "",
        "| part | step | status | wall s | note |",
        "|---|---|---|---|---|",
    ]
    steps = report["setup"]["steps"] + report["environment"]["steps"]
    steps += [s for p in report["parts"].values() for s in p["steps"]]
    for s in steps:
        note = (s.get("error") or _step_note(s) or "").replace("|", "/").replace("\n", " ")[:160]
        lines.append(f"| {s['part']} | {s['name']} | {s['status']} | {_f(s.get('wall_s'), '.1f')} | {note} |")
    renders = (("engine", _md_engine), ("batch", _md_batch), ("memory", _md_memory), ("tuner", _md_tuner))
    for name, render in (*renders, ("llama", _md_llama)):
        part = report["parts"].get(name)
        if part:
            body = render(part["steps"])
            if body:
                lines += ["", f"## {name}", "", *body]
    failed = [s for s in steps if s["status"] in ("failed", "timeout")]
    if failed:
        lines += ["", "## failures", ""]
        for s in failed:
            tail = "\n".join((s.get("stderr_tail") or s.get("stdout_tail") or "").strip().splitlines()[-12:])
            lines += [f"`{s['part']}/{s['name']}`: `{s['command'][:300]}`", "", "```", tail, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _step_note(s: dict[str, Any]) -> str:
    data = s.get("data")
    if not isinstance(data, dict):
        return ""
    if "summary" in data and isinstance(data["summary"], str):
        return data["summary"]
    if "setup" in data and isinstance(data["setup"], dict):
        target = data["setup"].get("target")
        return target.get("forward", "") if isinstance(target, dict) else str(data["setup"].get("forward_path", ""))
    return ""


def _md_engine(steps: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| --forward | target path | plain tok/s | transformers tok/s | ngram ON/OFF | suffix ON/OFF | draft ON/OFF"
        " | mtp g1 ON/OFF | identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    costs: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict) or "tokens_per_s" not in d:
            continue
        plain, hf = (d["tokens_per_s"].get(c) or {} for c in ("spectune_plain", "transformers_greedy"))
        rows.append(
            f"| {s['name']} | {d['setup']['target']['forward'][:60]} | {_f(plain.get('median'), '.0f')}"
            f" | {_f(hf.get('median'), '.0f')} | {_f(d.get('ngram_on_vs_off'))}"
            f" | {_f(d.get('suffix_on_vs_off'))} | {_f(d.get('draft_on_vs_off'))} | {_f(d.get('mtp_g1_on_vs_off'))}"
            f" | {d.get('identical')} |"
        )
        for model, by_path in ((d.get("costs") or {}).get("paths") or {}).items():
            for path, c in by_path.items():
                if "t_s" in c:
                    t1 = c["t_s"].get("1", c["t_s"].get(1))
                    r5 = c["R"].get("5", c["R"].get(5))
                    ms = _f(t1 * 1e3 if t1 else None, ".3f")
                    costs.append(f"| {s['name']} | {model} | {path} | {ms} | {_f(r5)} |")
    if len(rows) == 2:
        return []
    out = [*rows]
    if costs:
        out += ["", "Cost profile (t_1 = one 1-token forward, R_5 = t_5 / t_1):", ""]
        out += ["| run | model | path | t_1 ms | R_5 |", "|---|---|---|---|---|", *costs]
    return out


def _md_batch(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict) or "rows" not in d:
            continue
        out += [
            f"{d['setup'].get('forward_path', '')} on {d['setup'].get('resolved_device', '?')}",
            "",
            "| N | drafter | tok/s | ON/OFF at N | vs N=1 | acc len | diverged |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in d["rows"]:
            out.append(
                f"| {r['sessions']} | {r['drafter']} | {_f(r['tokens_per_s'], '.0f')} | {_f(r['on_vs_off'])}"
                f" | {_f(r['vs_one_session'])} | {_f(r['mean_accepted_length'])}"
                f" | {r['diverged_streams']}/{r['sessions']} |"
            )
    return out


def _md_memory(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict):
            continue
        if "rows" in d:
            mib = 2**20
            overhead = _f((d.get("runtime_overhead_bytes") or 0) / mib)
            out += [
                f"{d.get('forward', '')}; runtime overhead measured {overhead} MiB",
                "",
                "| drafter | context | measured peak MiB | estimate MiB | peak / estimate | within the estimate at"
                " the caches' reservation |",
                "|---|---|---|---|---|---|",
            ]
            for r in d["rows"]:
                peak = r["measured_peak_bytes"]
                out.append(
                    f"| {r['drafter']} | {r['context']} | {_f(peak / mib if peak is not None else None)}"
                    f" | {_f(r['estimate_bytes'] / mib)} | {_f(r['peak_over_estimate'], '.3f')}"
                    f" | {r['peak_within_estimate_at_reservation']} |"
                )
        elif "summary" in d:
            out += [f"`{s['name']}`: {d['summary'] or 'no summary line'}", ""]
    return out


def _md_tuner(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict):
            continue
        out += [f"wall {_f(s.get('wall_s'), '.1f')} s; trials {d.get('trials')}; device {d.get('device')}", "", "```"]
        out += d.get("winner_lines") or ["(no winner line printed)"]
        out += ["```"]
    return out


def _md_llama(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict):
            continue
        if "devices" in d:
            out += [f"`{d.get('binary')}`: lists {', '.join(d['devices'][1:]) or 'nothing'}", ""]
        elif "candidate" in d:
            on, off = d["candidate"], d["baseline"]
            out.append(
                f"draft-mtp, one swe-lite task: speedup {_f(d.get('speedup'))}, decode tok/s OFF"
                f" {_f(off.get('decode_tokens_per_s'), '.0f')} ON {_f(on.get('decode_tokens_per_s'), '.0f')},"
                f" mean accepted length {_f(on.get('mean_accepted_length'))}"
            )
    return out


def write_report(out_dir: Path, report: dict[str, Any]) -> None:
    """Write the JSON report and its markdown (atomically: a run killed mid-write keeps the previous one)."""
    for name, text in ((REPORT, json.dumps(report, indent=2, default=str)), (MARKDOWN, report["markdown"])):
        write_atomic(out_dir / name, text)
