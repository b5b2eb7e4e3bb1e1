"""``trace-rl bench``: policies x envs on the same held-out seeds, paired against a baseline.

Everything that can be checked (counts, the split's seeds, policy specs, every env id, scripted
policies' task annotations) is checked before any model loads. ``run_dir=`` registers the envs a
pipeline run synthesized (its ``synthesis/manifest.json``) and benches on them after ``envs``. Writes
``bench.json``, ``bench.html`` and one trajectories file per (env, policy) into ``out_dir``; an ``out_dir`` that
already holds them is refused unless ``if_exists=overwrite`` (which removes the earlier files first).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from trace_train.commands._app import command_app


def result_files(out: Path) -> list[Path]:
    """What a bench wrote into ``out``: ``bench.json``, its page and the trajectories of the (env, policy) rows
    ``bench.json`` names (none without one)."""
    index = out / "bench.json"
    if not index.is_file():
        return []
    try:
        rows = json.loads(index.read_text(encoding="utf-8")).get("rows") or []
        names = [f"trajectories_{_slug(str(r['env']))}_{_slug(str(r['policy']))}.jsonl" for r in rows]
    except (ValueError, AttributeError, KeyError, TypeError, OSError):
        names = []
    return [index, out / "bench.html", *(out / n for n in names)]


def named_policies(overrides: list[str]) -> set[str]:
    """The policy names a command line's overrides set (``policies.<name>...``, ``+policies.<name>=...``)."""
    names = set()
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key.startswith("policies."):
            names.add(key.split(".")[1])
    return names


def _checked(cfg: DictConfig, named: set[str]) -> tuple[dict[str, int], list[str], dict]:
    """The checked counts, envs and policies; ``named``: the policies the command line set (with
    ``run_policies``, only those replace the run's own models of the same name)."""
    from trace_envs.env_refs import register_run_dir
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._validate import check_bool, check_counts
    from trace_train.commands.eval import policies_from_config
    from trace_train.commands.rollout import check_count, check_seed_range
    from trace_train.policies import check_policy_env

    counts = {k: check_count(cfg, k, 1) for k in ("episodes", "trials", "batch_episodes", "n_boot")}
    check_counts(cfg, {"seed": 0})
    check_bool(cfg, "run_greedy")
    check_bool(cfg, "run_policies")
    check_seed_range(cfg.split, counts["episodes"])
    raw_envs = OmegaConf.to_container(cfg.envs, resolve=True) if OmegaConf.is_config(cfg.envs) else cfg.envs
    if isinstance(raw_envs, str):  # envs=trace/retail-sim-v0: one env
        raw_envs = [raw_envs]
    if raw_envs is not None and not isinstance(raw_envs, list):
        raise ValueError(f"envs must be an env id or a list of them, got {raw_envs!r}; set envs=[<id>, ...]")
    envs = [str(e) for e in (raw_envs or [])]
    if cfg.get("run_dir"):
        envs += [e for e in register_run_dir(to_absolute_path(str(cfg.run_dir))) if e not in envs]
    if not envs:
        raise ValueError("no env to bench on; set envs=[<id>, ...] or run_dir=<pipeline run>")
    resolve_cfg_envs(cfg, envs)
    policies = policies_from_config(cfg)
    if cfg.run_policies:
        if not cfg.get("run_dir"):
            raise ValueError("run_policies=true needs run_dir=<pipeline run>")
        from trace_train.bench.from_run import run_policies

        found = run_policies(to_absolute_path(str(cfg.run_dir)), greedy=bool(cfg.run_greedy))
        # a policy given by name on the command line wins; the config's default base does not replace the run's
        given = {name: spec for name, spec in policies.items() if name in named or name not in found}
        policies = {**found, **given}
    if not policies:
        raise ValueError("no policy to bench; set policies.<name>={kind: ..., ...}")
    if cfg.baseline is not None and str(cfg.baseline) not in policies:
        raise ValueError(f"baseline={cfg.baseline} is not one of the policies {sorted(policies)}")
    for spec in policies.values():
        for env in envs:
            check_policy_env(spec, env)
    return counts, envs, policies


def bench_table(result) -> Table:
    ks = sorted({k for r in result.rows for k in r.pass_k}, key=int)
    table = Table(title=f"{result.split} split, {result.episodes} seeds x {result.trials}; Δ and p vs "
                        f"{result.baseline} (paired bootstrap over seeds, McNemar exact)")
    for col in ("env", "policy", "success [95% CI]", *[f"pass^{k}" for k in ks], "Δ [95% CI]", "b/c", "p"):
        table.add_column(col, justify="left" if col in ("env", "policy") else "right")
    for r in result.rows:
        delta = ("–", "–", "–") if r.delta is None else (
            f"{r.delta:+.3f} [{r.delta_low:+.3f}, {r.delta_high:+.3f}]", f"{r.mcnemar_b}/{r.mcnemar_c}",
            f"{r.mcnemar_p:.4f}")
        table.add_row(r.env, r.policy, f"{r.success:.2f} [{r.low:.2f}, {r.high:.2f}] n={r.n}",
                      *[f"{r.pass_k[k]:.3f}" if k in r.pass_k else "–" for k in ks], *delta)
    return table


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


@command_app("bench")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from trace_envs.records import write_json_atomic, write_trajectories
    from trace_train.bench import run_bench
    from trace_train.bench.html import write_html
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_results_dir, remove_stale_results
    from trace_train.commands.rollout import exit_with

    try:
        check_multirun_output(cfg, "out_dir", "${hydra:runtime.output_dir}", "its bench.json and trajectories")
        counts, envs, policies = _checked(cfg, named_policies(list(HydraConfig.get().overrides.task)))
        out = Path(to_absolute_path(str(cfg.out_dir)))
        earlier = check_results_dir(out, "out_dir", result_files, cfg.get("if_exists"))
    except ValueError as exc:
        exit_with("bench", str(exc))
    played: dict = {}
    result = run_bench(policies, envs, str(cfg.split), counts["episodes"], counts["trials"],
                       baseline=cfg.baseline, batch=counts["batch_episodes"], n_boot=counts["n_boot"],
                       seed=int(cfg.seed), played=played)
    for (env, name), records in played.items():
        write_trajectories(out / f"trajectories_{_slug(env)}_{_slug(name)}.jsonl", records)
    write_json_atomic(out / "bench.json", {"envs": envs, **result.to_dict()})
    page = write_html(result, out / "bench.html")
    remove_stale_results(earlier)  # if_exists=overwrite: no file of the earlier run stays
    console = Console()
    console.print(bench_table(result))
    console.print(f"-> {out / 'bench.json'}, {page}")
