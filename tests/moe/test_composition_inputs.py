"""Compositions from what users actually pass: adapter version directories, damaged adapters and gates,
top-k compositions to extend, malformed gate examples; and the routing trace's first choice of a top-k gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.moe.moe_helpers import load_base, make_adapter, make_base
from trace_envs.records import TrajectoryRecord
from trace_moe import ComposedModel, GateConfig
from trace_moe.adapters import default_adapter_name, load_adapter
from trace_moe.examples import read_examples
from trace_moe.routing_trace import route_record

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    base = make_base(root)
    # what `trace-rl train` publishes: <output_dir>/adapters/<name>/v0015
    versions = [make_adapter(base, root / "train" / name / "adapters" / name / "v0015", seed=100 + i)
                for i, name in enumerate(["precondition", "structured"])]
    return root, base, versions


def test_version_directories_are_named_after_their_adapter(parts):
    _, base, versions = parts
    assert [default_adapter_name(v) for v in versions] == ["precondition", "structured"]
    assert default_adapter_name("runs/x/adapters/cap/vfinal") == "vfinal"
    composed = ComposedModel.from_pretrained(base, versions)
    assert composed.slot_names == ["base", "precondition", "structured"]


def test_a_damaged_adapter_is_a_value_error_naming_it(parts, tmp_path):
    _, _, versions = parts
    broken = shutil.copytree(versions[0], tmp_path / "broken")
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:40])
    with pytest.raises(ValueError, match=f"adapter 'broken' \\({broken}\\) is damaged"):
        load_adapter(broken)
    listed = shutil.copytree(versions[0], tmp_path / "listed")
    (listed / "adapter_config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="is damaged or not a peft LoRA directory"):
        load_adapter(listed)


def test_nan_gates_and_top_k_compositions_are_refused_where_they_would_mislead(parts, tmp_path):
    root, base, versions = parts
    composed = ComposedModel(load_base(base), [load_adapter(versions[0])], GateConfig(top_k=2, weighting="selection"))
    saved = composed.save(tmp_path / "top2")
    with pytest.raises(ValueError, match="extend keeps the routing of top-1 gates only"):
        ComposedModel.extend(saved, versions[1], model=load_base(base))
    gates = load_file(str(saved / "gates.safetensors"))
    first = next(k for k in gates if k.endswith("weight"))
    gates[first][0, 0] = float("nan")
    save_file(gates, str(saved / "gates.safetensors"))
    with pytest.raises(ValueError, match="hold NaN or inf values"):
        ComposedModel.load(saved, model=load_base(base))
    with pytest.raises(ValueError, match="no compose.json"):
        ComposedModel.load(tmp_path, model=load_base(base))


def test_a_saved_composition_records_its_base_by_absolute_path(parts, tmp_path, monkeypatch):
    root, base, versions = parts
    monkeypatch.chdir(root)
    model = load_base(Path("base"))
    model.name_or_path = "base"  # as loaded from a relative path
    saved = ComposedModel(model, [load_adapter(versions[0])]).save(tmp_path / "c")
    assert json.loads((saved / "compose.json").read_text())["base_model"] == str(base.resolve())


def test_the_trace_reports_a_top_k_gates_first_choice_under_selection(parts):
    _, base, versions = parts
    for weighting in ("probability", "selection"):
        composed = ComposedModel(load_base(base), [load_adapter(v) for v in versions],
                                 GateConfig(init="zero", top_k=2, weighting=weighting)).eval()
        with torch.no_grad():
            for gate in composed.gates:
                gate.proj.bias.copy_(torch.tensor([0.0, 1.0, 3.0]))  # slot 2 first, slot 1 second
        record = TrajectoryRecord(env_id="x", seed=0, messages=[], reward=1.0, success=True, termination="done",
                                  token_ids=list(range(5, 15)), loss_mask=[0] * 3 + [1] * 7)
        routing = route_record(composed, record)
        assert set(routing.slots) == {2}, weighting
        with composed.forcing(1):
            assert set(route_record(composed, record).slots) == {1}


@pytest.mark.parametrize("row,message", [
    ({"token_ids": [1, 2], "loss_mask": [0, 1], "info": "cap0", "success": True}, "field 'info' must be an object"),
    ({"token_ids": "abc", "loss_mask": [0, 1, 1], "label": 1}, "token ids must be a list of integers"),
    ({"token_ids": [1, 2, 3], "loss_mask": [0, 1], "label": 1}, "3 token ids but 2 loss_mask entries"),
])
def test_malformed_gate_examples_stop_at_their_line(tmp_path, row, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"token_ids": [1, 2], "loss_mask": [0, 1], "label": 1}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=f"rows.jsonl:2: {message}"):
        read_examples(path, ["base", "cap0"])
