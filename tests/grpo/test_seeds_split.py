from trace_envs.splits import SPLITS
from trace_train.grpo.seeds import env_seed


def test_env_seeds_stay_in_the_train_split():
    seeds = {env_seed(run, it, g) for run in range(3) for it in range(20) for g in range(16)}
    assert all(s in SPLITS["train"] for s in seeds)
    assert not seeds & set(SPLITS["test"])
    assert len(seeds) > 900  # still spread out
