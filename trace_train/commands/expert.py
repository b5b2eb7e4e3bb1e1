"""``trace-rl expert``: the scripted oracle vs the imperfect expert on held-out seeds, per capability."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig
from rich.console import Console
from rich.progress import track
from rich.table import Table

from trace_train.paths import CONF_DIR

logger = logging.getLogger(__name__)


def score_experts(cfg: DictConfig) -> dict[str, object]:
    import trace_envs  # noqa: F401  (registers the ids)
    from trace_envs.retail_sim import ExpertKnobs, ScriptedExpert, split_seeds
    from trace_train.evaluation import summarize
    from trace_train.rollout.base import EpisodeRequest
    from trace_train.rollout.scripted import ScriptedRolloutBackend

    seeds = split_seeds(cfg.split, int(cfg.episodes))
    requests = [EpisodeRequest(env_id=cfg.env, seed=s, sample_seed=int(cfg.seed)) for s in seeds]
    policies = {
        "oracle": lambda seed: ScriptedExpert(seed=seed, name="oracle"),
        "imperfect-expert": lambda seed: ScriptedExpert(ExpertKnobs(**cfg.knobs), seed=seed, name="imperfect-expert"),
    }
    summaries = {}
    for name, factory in policies.items():
        backend = ScriptedRolloutBackend(factory)
        records = [backend.rollout([r])[0] for r in track(requests, description=f"{name:>16}")]
        summaries[name] = summarize(records, policy=name)
    return {name: s.to_dict() for name, s in summaries.items()}


def print_table(result: dict[str, dict], console: Console) -> None:
    table = Table(title="pass rate on held-out seeds (95 % Wilson interval)")
    table.add_column("tasks requiring")
    for name in result:
        table.add_column(name, justify="right")
    caps = sorted({c for r in result.values() for c in r["per_capability"]})
    rows = [("all tasks", {n: r["overall"] for n, r in result.items()})]
    rows += [(c, {n: r["per_capability"].get(c) for n, r in result.items()}) for c in caps]
    for label, cells in rows:
        rendered = []
        for cell in cells.values():
            rendered.append("–" if cell is None else
                            f"{cell['rate']:.2f} [{cell['low']:.2f}, {cell['high']:.2f}] n={cell['n']}")
        table.add_row(label, *rendered)
    console.print(table)


@hydra.main(config_path=str(CONF_DIR), config_name="expert", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.trajectory import write_json_atomic

    result = score_experts(cfg)
    print_table(result, Console())
    out = Path(cfg.out)
    write_json_atomic(out, result)
    logger.info("wrote %s", out.resolve())
