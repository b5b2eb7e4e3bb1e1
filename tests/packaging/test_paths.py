"""Assets resolve from the installed package, the shipped base never from the working directory, and
template envs register from manifest rows."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from omegaconf import OmegaConf

import generated_envs
import trace_envs  # noqa: F401
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.paths import CONF_DIR, REPO_ROOT, AssetNotFoundError, generated_envs_dir, shipped_checkpoint
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.stages import resolve_base_model


def _bootstrap_cfg() -> BootstrapConfig:
    return BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / "default.yaml").read_text()))


def test_shipped_checkpoint_and_resolver_ignore_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no checkpoints/ here
    base = shipped_checkpoint()
    assert base.is_absolute() and (base / "model.safetensors").is_file()
    assert shipped_checkpoint("checkpoints/retail-sim-tiny") == base
    assert OmegaConf.create({"m": "${shipped:retail-sim-tiny}"}).m == str(base)
    with pytest.raises(AssetNotFoundError, match=r"no shipped checkpoint 'nope'.*shipped: \['retail-sim-tiny'\]"):
        shipped_checkpoint("nope")
    out = resolve_base_model(PipelineConfig(), _bootstrap_cfg(), tmp_path / "bootstrap", REPO_ROOT)
    assert out == {"model": str(base), "source": "shipped", "config_hash": _bootstrap_cfg().content_hash()}
    assert not (tmp_path / "bootstrap").exists()


def test_a_missing_model_directory_fails_in_one_line_instead_of_rebootstrapping(tmp_path):
    cfg = _bootstrap_cfg()
    with pytest.raises(AssetNotFoundError, match="reinstall trace-rl"):
        resolve_base_model(PipelineConfig(shipped_checkpoint="retail-sim-huge"), cfg, tmp_path / "b", REPO_ROOT)
    with pytest.raises(FileNotFoundError, match="shipped_checkpoint=null to bootstrap"):
        resolve_base_model(PipelineConfig(shipped_checkpoint=str(tmp_path / "gone")), cfg, tmp_path / "b", REPO_ROOT)
    with pytest.raises(FileNotFoundError, match=r"base_model=\./nowhere: no HF model directory"):
        resolve_base_model(PipelineConfig(base_model="./nowhere"), cfg, tmp_path / "b", REPO_ROOT)
    assert not (tmp_path / "b").exists()  # nothing was bootstrapped
    hub = resolve_base_model(PipelineConfig(base_model="Qwen/Qwen3-30B-A3B-Instruct-2507"), cfg, tmp_path, REPO_ROOT)
    assert hub == {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "source": "hub"}


def test_template_envs_register_from_manifest_rows(tmp_path, caplog):
    row = {"env_id": "trace/precondition_verification-pkgtest-v0", "family": "precondition_verification",
           "domain": "retail-sim", "knobs": {"refuse_fraction": 0.7},
           "entry_point": "os:system"}  # informational only: the family decides the entry point
    bad = {"env_id": "trace/x-pkgtest-v0", "family": "no_such_family", "knobs": {}}
    (tmp_path / "manifest.json").write_text(json.dumps({"envs": [row, bad]}))
    try:
        assert generated_envs.load(tmp_path) == [row["env_id"]]
        spec = gym.spec(row["env_id"])
        assert spec.entry_point == "trace_envs.families.precondition:PreconditionVerificationEnv"
        assert spec.kwargs == {"domain": "retail-sim", "refuse_fraction": 0.7}
        assert "unknown family 'no_such_family'" in caplog.text
        env = gym.make(row["env_id"])
        env.reset(seed=1)
        assert env.unwrapped.__class__.__name__ == "PreconditionVerificationEnv"
    finally:
        gym.registry.pop(row["env_id"], None)
    assert not list(tmp_path.glob("*.py"))


def test_emitted_envs_default_outside_the_packages():
    default = generated_envs_dir()
    assert default == Path.home() / ".local" / "share" / "trace-rl" / "generated_envs"
    assert not default.is_relative_to(Path(generated_envs.__file__).parent)
    assert not default.is_relative_to(REPO_ROOT)


def test_loading_emitted_envs_without_a_home_directory_skips_the_user_folder(monkeypatch, caplog):
    """``Path.home()`` raises when HOME is unset and the uid has no passwd entry; `import trace_envs` must not."""
    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with caplog.at_level("WARNING", logger="generated_envs"):
        ids = generated_envs.load()
    shipped = [row["env_id"] for row in generated_envs.read_manifest(generated_envs.generated_dir())["envs"]]
    assert ids == shipped
    assert "home directory cannot be determined" in caplog.text


def test_the_declared_transformers_floor_reads_the_shipped_tokenizer():
    """The shipped base's tokenizer class exists from transformers 5 on; an older floor installs a broken base."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    requires = {line.split(">=")[0].strip(): line.split(">=")[1].strip()
                for line in cfg["options"]["install_requires"].strip().splitlines() if ">=" in line}
    tokenizer = json.loads((shipped_checkpoint() / "tokenizer_config.json").read_text())
    if tokenizer.get("tokenizer_class") == "TokenizersBackend":
        assert int(requires["transformers"].split(".")[0]) >= 5, requires["transformers"]
