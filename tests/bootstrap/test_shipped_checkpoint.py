"""The shipped base checkpoint is the one ``conf/bootstrap/default.yaml`` makes, and it loads and plays."""

import json

import yaml

from trace_envs.retail_sim import atomic_vocabulary
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.model import atomic_token_ids, load_policy
from trace_train.model.chat_template import chat_template
from trace_train.paths import CONF_DIR, REPO_ROOT

SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"


def test_shipped_checkpoint_matches_the_default_bootstrap_config():
    meta = json.loads((SHIPPED / "bootstrap.json").read_text())
    cfg = BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / "default.yaml").read_text()))
    assert meta["config_hash"] == cfg.content_hash(), "conf/bootstrap/default.yaml changed: rerun trace-rl bootstrap"
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) < 20 * 2**20


def test_shipped_checkpoint_loads_with_one_token_ids_and_no_tool_schemas():
    model, tokenizer = load_policy(SHIPPED)
    assert tokenizer.chat_template == chat_template("none")
    assert len(atomic_token_ids(tokenizer, atomic_vocabulary())) == len(atomic_vocabulary())
    assert model.config.num_hidden_layers == 2 and sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_hints_stage_continues_from_the_shipped_base():
    default = BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / "default.yaml").read_text()))
    hints = BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / "with_hints.yaml").read_text()))
    assert hints.parent.content_hash() == default.content_hash()
    assert hints.hint_fraction > 0 and len(hints.decisions) == 4 and hints.last_step < hints.steps
    assert min(vars(hints.knobs).values()) > 0.5  # the greedy base still fails every capability
