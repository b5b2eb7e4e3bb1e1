"""trace-rl training side: rollouts, trajectory store, GRPO, bootstrap, analysis, evaluation, CLI."""
