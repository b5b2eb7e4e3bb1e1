"""Review 43: under multi-process TRL, the members of one env seed's group that TRL's RepeatSampler spreads over
processes each get their own sampler seed; a single process keeps the seeds it always had."""

from __future__ import annotations

from accelerate.data_loader import BatchSamplerShard
from torch.utils.data import BatchSampler
from trl.trainer.utils import RepeatSampler

import trace_envs  # noqa: F401  (registers the envs)
from trace_train.integrations.trl_rollout import TraceEnvRollout, member_seed, seed_prompts
from trace_train.trajectory import TrajectoryRecord

ENV_ID = "trace/precondition_verification-v0"


class _Backend:
    """Records the requests it is asked to play; every episode is one sampled token."""

    def __init__(self) -> None:
        self.requests = []

    def rollout(self, requests, sampling, adapter):
        self.requests += list(requests)
        return [TrajectoryRecord(env_id=q.env_id, seed=q.seed, messages=[], reward=0.0, success=False,
                                 termination="done", token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0])
                for q in requests]


class _Trainer:
    """What the rollout reads from a TRL trainer, with the accelerator's process index."""

    def __init__(self, process_index: int | None, step: int = 0, seed: int = 42) -> None:
        self.model, self.processing_class = None, None
        self.args = type("Args", (), {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None,
                                      "repetition_penalty": 1.0, "seed": seed})()
        self.state = type("State", (), {"global_step": step})()
        if process_index is not None:
            self.accelerator = type("Accelerator", (), {"process_index": process_index})()


def test_a_group_spread_over_two_processes_gets_distinct_sampler_seeds():
    """num_generations 4, 2 processes x 2 prompts: TRL puts 2 copies of the same env seed on each process."""
    prompts = seed_prompts(range(100, 108))
    group_size, per_device, processes = 4, 2, 2
    sampler = RepeatSampler(prompts, mini_repeat_count=group_size, batch_size=per_device * processes // group_size,
                            repeat_count=1, shuffle=False)
    batches = BatchSampler(sampler, per_device, drop_last=False)
    backend = _Backend()
    rollout = TraceEnvRollout(ENV_ID, backend_factory=lambda model, tok: backend)
    for process in range(processes):
        first = next(iter(BatchSamplerShard(batches, num_processes=processes, process_index=process)))
        rollout([prompts[i] for i in first], _Trainer(process))
    assert [q.seed for q in backend.requests] == [100] * 4  # one group, over both processes
    assert len({q.sample_seed for q in backend.requests}) == 4


def test_single_process_seeds_are_unchanged():
    """The seeds a single process gave before the fix (values from the code before it), with and without an
    accelerator; a member is numbered within its env seed."""
    prompts = seed_prompts([3, 3, 5, 3, 5, 8])
    before = [18184777565091086336, 8750985785302272000, 13798707950439108608, 10345281179066943488,
              4879576859136528384, 4892630739116363776]
    rollout = TraceEnvRollout(ENV_ID)
    assert [q.sample_seed for q in rollout.requests(prompts, 2, 7)] == before
    assert before[:3] == [member_seed(7, 2, 3, 0), member_seed(7, 2, 3, 1), member_seed(7, 2, 5, 0)]
    for trainer in (_Trainer(None, step=2, seed=7), _Trainer(0, step=2, seed=7)):
        backend = _Backend()
        TraceEnvRollout(ENV_ID, backend_factory=lambda model, tok, b=backend: b)(prompts, trainer)
        assert [q.sample_seed for q in backend.requests] == before
