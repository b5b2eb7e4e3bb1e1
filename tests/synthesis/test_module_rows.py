"""Module rows (an LLM-written env's wrapper) from two folders for one capability: each folder's wrapper is its own
module, the later load registers its own source (said in the log), loading the first again switches back, and a
row whose wrapper claims an id other code registered leaves that id alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import gymnasium as gym
import pytest

import generated_envs
import trace_envs  # noqa: F401
from trace_envs.synthesis.llm.emit_llm import _WRAPPER
from trace_envs.synthesis.llm.loader import ENTRY_POINT

CAP = "shadow_rowtest"
ENV_ID = f"trace/{CAP}-v0"


def _folder(root: Path, run: str, name: str = CAP, env_id: str = ENV_ID) -> Path:
    folder = root / run / "synthesis"
    folder.mkdir(parents=True)
    (folder / f"{CAP}_llm_source.py").write_text(f"# the env module of {run}\n")
    (folder / f"{CAP}_llm.py").write_text(_WRAPPER.format(
        capability=CAP, domain="retail-sim", model="m", attempt=1, source=f"{CAP}_llm_source.py", sha256=run,
        name=name, entry_point=ENTRY_POINT))
    (folder / "manifest.json").write_text(json.dumps({"envs": [
        {"env_id": env_id, "capability": CAP, "domain": "retail-sim", "module": f"{CAP}_llm.py"}]}))
    return folder


@pytest.fixture
def clean_registry():
    yield
    gym.registry.pop(ENV_ID, None)


def test_the_later_folders_module_row_registers_its_own_source(tmp_path, caplog, clean_registry):
    a, b = _folder(tmp_path, "runA"), _folder(tmp_path, "runB")
    assert generated_envs.load(a) == [ENV_ID]
    assert gym.spec(ENV_ID).kwargs["sha256"] == "runA"
    with caplog.at_level(logging.INFO, logger="generated_envs"):
        assert generated_envs.load(b) == [ENV_ID]
    assert gym.spec(ENV_ID).kwargs["sha256"] == "runB"
    assert Path(gym.spec(ENV_ID).kwargs["source"]).parent == b
    assert any("re-registered from" in r.getMessage() and "runB" in r.getMessage() for r in caplog.records)
    assert generated_envs.load(a) == [ENV_ID]
    assert gym.spec(ENV_ID).kwargs["sha256"] == "runA"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="generated_envs"):
        assert generated_envs.load(a) == [ENV_ID]  # loading the same folder again changes nothing, says nothing
    assert gym.spec(ENV_ID).kwargs["sha256"] == "runA" and not caplog.records


def test_a_module_row_may_not_take_an_id_other_code_registered(tmp_path, caplog):
    before = gym.spec("trace/retail-sim-v0")
    folder = _folder(tmp_path, "runC", name="retail-sim", env_id="trace/retail-sim-v0")
    with caplog.at_level(logging.WARNING, logger="generated_envs"):
        assert generated_envs.load(folder) == []
    assert gym.spec("trace/retail-sim-v0") == before
    assert any("belongs to another env" in r.getMessage() for r in caplog.records)
