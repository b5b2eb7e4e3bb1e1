"""The shipped base checkpoint is the one ``conf/bootstrap/default.yaml`` makes, and it loads and plays."""

import json

import yaml

from trace_envs.retail_sim import atomic_vocabulary
from trace_train.bootstrap.compare import model_fingerprint
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


def _stage(name: str) -> BootstrapConfig:
    return BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / f"{name}.yaml").read_text()))


def test_the_shipped_base_is_stage_five_on_the_hints_stage_on_stage_three():
    shipped, hints, stage3 = _stage("default"), _stage("with_hints"), _stage("stage3")
    assert shipped.parent.content_hash() == hints.content_hash()
    assert hints.parent.content_hash() == stage3.content_hash()
    assert hints.hint_fraction > 0 and len(hints.decisions) == 4 and hints.last_step < hints.steps
    assert min(vars(hints.knobs).values()) > 0.5  # the greedy base still fails every capability
    # stage 5 keeps stage 4's knobs, decisions and hints and adds the system notes of the prompted baseline
    assert vars(shipped.knobs) == vars(hints.knobs) and shipped.decisions == hints.decisions
    assert shipped.hint_fraction == hints.hint_fraction and shipped.system_note_fraction > 0


def test_the_shipped_base_records_linear_probes_that_read_every_decision():
    probes = json.loads((SHIPPED / "bootstrap.json").read_text())["linear_probes"]
    assert set(probes) == {"precondition", "multi_step", "structured", "precision"}
    for decision, p in probes.items():  # issue #18: each decision read at >= 0.8 held-out
        assert p["points"] >= 50 and p["balanced_accuracy"] >= 0.8, (decision, p)


def test_the_shipped_base_records_its_own_fingerprint():
    # the fingerprint a remake is checked against (`trace-rl bootstrap compare_to=<fingerprint>`) is the shipped model's
    meta = json.loads((SHIPPED / "bootstrap.json").read_text())
    assert meta["model_fingerprint"] == model_fingerprint(SHIPPED)
