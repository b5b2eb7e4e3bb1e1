"""BootstrapConfig refuses values that would crash a run later or silently train something else."""

import math

import pytest
import yaml

from trace_train.bootstrap.config import BootstrapConfig
from trace_train.paths import CONF_DIR


@pytest.mark.parametrize("kwargs,field", [
    ({"checkpoint_every": 0}, "checkpoint_every"), ({"batch_size": 0}, "batch_size"), ({"steps": 0}, "steps"),
    ({"stop_step": 0}, "stop_step"), ({"stop_step": -3}, "stop_step"),
    ({"lr": 0.0}, "lr"), ({"lr": -1.0}, "lr"), ({"lr": math.nan}, "lr"),
    ({"hint_fraction": 1.5}, "hint_fraction"), ({"hint_fraction": -0.1}, "hint_fraction"),
    ({"hint_uptake": 2.0}, "hint_uptake"),
    ({"system_note_fraction": -0.2}, "system_note_fraction"), ({"system_note_fraction": 1.01}, "system_note_fraction"),
    ({"warmup_steps": -5}, "warmup_steps"), ({"max_len": 0}, "max_len"), ({"max_len": -1}, "max_len"),
    ({"decisions": ("nonsense",), "decision_loss_weight": 1.0}, "decisions"), ({"decisions": ()}, "decisions"),
    ({"decisions": ("precondition", "precondition")}, "decisions"),
])
def test_bootstrap_config_refuses_values_out_of_range(kwargs, field):
    with pytest.raises(ValueError, match=f"bootstrap.{field}"):
        BootstrapConfig(**kwargs)
    with pytest.raises(ValueError, match=field):
        BootstrapConfig.from_dict({k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()})


def test_the_edges_of_the_ranges_are_accepted():
    cfg = BootstrapConfig(steps=1, batch_size=1, checkpoint_every=1, stop_step=1, warmup_steps=0, max_len=1,
                          hint_fraction=1.0, hint_uptake=1.0, system_note_fraction=1.0,
                          decisions=("precondition", "multi_step", "structured", "precision"))
    assert cfg.last_step == 1
    assert BootstrapConfig(steps=10, stop_step=None).last_step == 10
    assert BootstrapConfig(steps=10, stop_step=40).last_step == 10


@pytest.mark.parametrize("name", ["default", "stage3", "with_hints"])
def test_the_shipped_presets_still_build(name):
    cfg = BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / f"{name}.yaml").read_text()))
    while cfg is not None:  # every stage of the chain
        assert cfg.content_hash()
        cfg = cfg.parent
