"""``preset=paper`` composes (no run) to τ² airline + retail with an LLM user, the LLM labeler, the openai
backend and the paper's hyper-parameters; retail-sim stays one override away."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from trace_train.paths import CONF_DIR
from trace_train.pipeline.config import PipelineConfigs, target_domain
from trace_train.pipeline.policy_play import base_spec

AIRLINE, RETAIL = "trace/tau2-airline-llm-v0", "trace/tau2-retail-llm-v0"


def configs(*overrides: str) -> PipelineConfigs:
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return PipelineConfigs.from_hydra(compose("pipeline", overrides=["preset=paper", *overrides]))


def test_paper_preset_targets_tau2_with_the_papers_settings():
    c = configs()
    p = c.pipeline
    assert p.targets == [AIRLINE, RETAIL] and p.multi_target
    assert (p.rollouts.split, p.eval.split, p.eval.trials) == ("train", "test", 4)
    for env_id, split in ((AIRLINE, "train"), (RETAIL, "test")):
        kw = p.env_kwargs(env_id, split)
        assert kw["split"] == split  # the τ² task split follows the stage
        assert kw["user_config"] == {"base_url": "http://127.0.0.1:8000/v1", "model": "user-model",
                                     "temperature": 0.0, "seed": None}
    assert [target_domain(t, c.synthesis.domain) for t in p.targets] == ["tau2-airline", "tau2-retail"]
    assert p.labeler == "llm" and c.analysis.llm.base_url.startswith("http")
    assert (p.policy.kind, p.policy.base_urls, p.policy.render_tools) == ("openai", ["http://127.0.0.1:8000/v1"], True)
    assert p.base_model == "Qwen/Qwen3-30B-A3B-Instruct-2507" and p.shipped_checkpoint is None
    g = c.grpo
    assert (g.iterations, g.groups_per_iter, g.group_size, g.lr, g.temperature) == (50, 8, 16, 1e-5, 1.0)
    assert (g.lora.r, g.lora.alpha) == (16, 16)
    assert (c.moe.gate.base_bias, c.moe.train.lr, c.moe.train.epochs) == (5.0, 5e-4, 3)
    assert (c.synthesis.n_seeds, c.synthesis.group_size, c.synthesis.policy.kind) == (100, 16, "model")
    assert sorted(p.baselines) == ["grpo_target", "mixture", "prompted", "sft"]
    spec = base_spec(p, p.base_model, name="cap", adapter="/x/cap/v0005")
    assert (spec.kind, spec.base_urls, spec.served_model) == ("openai", ["http://127.0.0.1:8000/v1"], p.base_model)
    assert base_spec(p, p.base_model, kind="composed").kind == "composed"  # gates run in-process


def test_user_endpoint_override_moves_both_targets():
    p = configs("pipeline.target_env_kwargs.0.kwargs.user_config.base_url=http://10.0.0.2:9000/v1").pipeline
    assert {p.env_kwargs(t, "train")["user_config"]["base_url"] for t in p.targets} == {"http://10.0.0.2:9000/v1"}


def test_retail_sim_is_one_override_away():
    c = configs("pipeline.target_env=trace/retail-sim-v0")
    p = c.pipeline
    assert p.targets == ["trace/retail-sim-v0"] and not p.multi_target
    assert p.env_kwargs("trace/retail-sim-v0", "train") == {}  # the τ² kwargs are ignored
    assert target_domain("trace/retail-sim-v0", c.synthesis.domain) == "retail-sim"
