"""Every config dataclass goes through the strict builder; the YAML groups mirror their dataclasses."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from trace_envs.config_builder import ConfigError
from trace_envs.synthesis import SynthesisConfig
from trace_envs.tau2.evaluation import JudgeConfig
from trace_envs.tau2.users import UserConfig
from trace_moe.config import MoEConfig
from trace_train.analysis.config import AnalysisConfig
from trace_train.paths import CONF_DIR
from trace_train.policies import PolicySpec


def load(name: str) -> dict:
    return yaml.safe_load((CONF_DIR / name).read_text())


def test_analysis_yaml_is_the_analysis_dataclass():
    doc = load("analysis/default.yaml")
    cfg = AnalysisConfig.from_dict(doc)
    assert cfg == AnalysisConfig()  # YAML defaults == dataclass defaults, key for key
    assert set(doc) == {f.name for f in dataclasses.fields(AnalysisConfig)}
    with pytest.raises(ConfigError, match=r"^analysis: need n_runs >= 1 and 1 <= k <= n_runs"):
        AnalysisConfig.from_dict({"k": 11})


def test_moe_yaml_builds_and_rejects_typos():
    cfg = MoEConfig.from_dict(load("moe/default.yaml"))
    assert (cfg.gate.base_bias, cfg.train.lr, cfg.train.epochs, cfg.train.train_slots) == (1.0, 5e-3, 10, None)
    with pytest.raises(ConfigError, match=r"^moe\.train\.mode: expected one of \['end_to_end', 'captured'\]"):
        MoEConfig.from_dict({"train": {"mode": "both"}})
    with pytest.raises(ConfigError, match=r"^moe\.gate\.topk: unknown key \(did you mean 'top_k'\?\)"):
        MoEConfig.from_dict({"gate": {"topk": 2}})


def test_synthesis_yaml_builds_nested_frozen_configs():
    cfg = SynthesisConfig.from_dict(load("synthesis/default.yaml"))
    assert isinstance(cfg.pass_k, tuple) and all(isinstance(k, int) for k in cfg.pass_k)
    with pytest.raises(ConfigError, match=r"^synthesis\.pass_k\[1\]: expected int, got 'four' \(str\)"):
        SynthesisConfig.from_dict({"pass_k": [1, "four"]})
    with pytest.raises(ConfigError, match=r"synthesis\.policy\.kind must be one of"):
        SynthesisConfig.from_dict({"policy": {"kind": "oracle"}})
    with pytest.raises(ConfigError, match=r"^synthesis\.llm\.validation\.timeout_s: expected float"):
        SynthesisConfig.from_dict({"llm": {"validation": {"timeout_s": "slow"}}})


def test_tau2_user_and_judge_configs_no_longer_drop_unknown_keys():
    assert UserConfig.from_any(None) == UserConfig()
    assert UserConfig.from_any({"model": "u", "timeout_s": 5}).timeout_s == 5.0
    with pytest.raises(ConfigError, match=r"^user_config\.temprature: unknown key \(did you mean 'temperature'\?\)"):
        UserConfig.from_any({"model": "u", "temprature": 0.5})
    assert JudgeConfig.from_any(None) is None
    with pytest.raises(ConfigError, match=r"^judge\.model: missing required key"):
        JudgeConfig.from_any({"base_url": "http://127.0.0.1:1/v1"})


def test_tau2_env_refuses_a_mistyped_user_config_when_made():
    import gymnasium as gym

    import trace_envs  # noqa: F401

    with pytest.raises(ConfigError, match=r"^user_config\.seed: expected int"):
        gym.make("trace/tau2-retail-llm-v0", user_config={"base_url": "http://127.0.0.1:1/v1", "seed": "one"})


def test_policy_spec_errors_name_the_policy():
    assert PolicySpec.from_dict({"kind": "expert", "knobs": {"precondition": 1}}).knobs == {"precondition": 1.0}
    with pytest.raises(ConfigError, match=r"^policies\.base\.temprature: unknown key"):
        PolicySpec.from_dict({"kind": "hf", "model": "m", "temprature": 1.0}, "policies.base")
    with pytest.raises(ValueError, match=r"^policy\.kind: unknown policy kind 'vllm'"):
        PolicySpec.from_dict({"kind": "vllm"})
