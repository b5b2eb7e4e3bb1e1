"""``trace-rl rollout``: play a policy on a registered env; write trajectories.jsonl."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import track

from trace_train.paths import CONF_DIR

logger = logging.getLogger(__name__)


def rollout_requests(env_id: str, env_kwargs: dict, split: str, episodes: int, offset: int = 0,
                     group_size: int = 1) -> list:
    from trace_envs.splits import split_seeds
    from trace_train.rollout.base import group_requests

    return group_requests(env_id, env_kwargs, split_seeds(split, episodes, offset), group_size)


def run_rollouts(backend, requests, sampling, adapter, batch: int, label: str = "rollout"):
    records = []
    chunks = [requests[i: i + batch] for i in range(0, len(requests), batch)]
    for chunk in track(chunks, description=label):
        records.extend(backend.rollout(chunk, sampling, adapter))
    return records


@hydra.main(config_path=str(CONF_DIR), config_name="rollout", version_base=None)
def main(cfg: DictConfig) -> None:
    import gymnasium as gym

    import trace_envs  # noqa: F401
    from trace_train.evaluation import summarize
    from trace_train.policies import PolicySpec, build_backend
    from trace_train.trajectory import write_trajectories

    if cfg.env not in gym.registry:
        raise SystemExit(f"unknown env id {cfg.env!r}; registered trace ids: {trace_envs.trace_env_ids()}")
    spec = PolicySpec.from_dict(OmegaConf.to_container(cfg.policy, resolve=True))
    backend, adapter = build_backend(spec)
    requests = rollout_requests(cfg.env, OmegaConf.to_container(cfg.env_kwargs), cfg.split, int(cfg.episodes),
                                int(cfg.offset), int(cfg.group_size))
    records = run_rollouts(backend, requests, spec.sampling, adapter, int(cfg.batch_episodes))
    out = write_trajectories(Path(cfg.out), records)
    summary = summarize(records, policy=spec.name)
    Console().print(f"{len(records)} episodes of {spec.name} on {cfg.env}: success "
                    f"{summary.overall.rate:.3f}, mean reward {summary.mean_reward:.3f} -> {out}")
