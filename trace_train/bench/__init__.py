"""``trace-rl bench``: policies x envs on the same held-out seeds, paired against the base."""

from trace_train.bench.run import BenchResult, BenchRow, run_bench
from trace_train.bench.stats import mcnemar_exact, paired_bootstrap

__all__ = ["BenchResult", "BenchRow", "mcnemar_exact", "paired_bootstrap", "run_bench"]
