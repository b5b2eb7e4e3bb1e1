"""The LLM env generator's SWE flavour against the local fake OpenAI-compatible server: a good scenario is
validated in the SWE local sandbox, emitted with provenance and played by the SWE env; a target test that
already passes, an oracle patch that breaks another test and files that try to escape are rejected."""

import json
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from fake_llm import FakeLLM

import trace_envs  # noqa: F401
from trace_envs.core.parsing import format_tool_call
from trace_envs.synthesis import SelectedCapability, SynthesisConfig
from trace_envs.synthesis.llm.swe_scenario import check_scenario, is_swe_target, path_problems

REPO = Path(__file__).resolve().parents[3]
CAP = SelectedCapability("boundary_conditions", "checks the edges of a range the issue names", mean_delta=0.4)
PRICING = '''"""Pricing of order lines."""

BULK_QUANTITY = 10
BULK_DISCOUNT = 0.10


def line_total(unit_price, quantity):
    """Price of ``quantity`` units; orders of BULK_QUANTITY or more units get BULK_DISCOUNT off."""
    total = unit_price * quantity
    if quantity > BULK_QUANTITY:
        total *= 1 - BULK_DISCOUNT
    return round(total, 2)
'''
OLD, NEW = "    if quantity > BULK_QUANTITY:", "    if quantity >= BULK_QUANTITY:"


def scenario(**over) -> dict:
    doc = {
        "name": "bulk_threshold",
        "problem_statement": "Bulk discount is not applied at exactly 10 units: line_total(2.0, 10) returns 20.0, "
                             "the docs promise 18.0.",
        "files": {"shop/__init__.py": "from shop.pricing import line_total\n", "shop/pricing.py": PRICING,
                  "tests/__init__.py": "",
                  "tests/test_pricing.py": "from shop import line_total\n\n\ndef test_small():\n"
                                           "    assert line_total(0.5, 4) == 2.0\n\n\ndef test_eleven():\n"
                                           "    assert line_total(2.0, 11) == 19.8\n"},
        "target_tests": {"tests/test_bulk.py": "from shop import line_total\n\n\ndef test_threshold():\n"
                                               "    assert line_total(2.0, 10) == 18.0\n"},
        "fail_to_pass": ["tests/test_bulk.py::test_threshold"],
        "oracle_files": {"shop/pricing.py": PRICING.replace(OLD, NEW)},
    }
    doc.update(over)
    return doc


def answer(doc: dict, text: str = "Here is the scenario.") -> str:
    return f"{text}\n\n```json\n{json.dumps(doc, indent=1)}\n```\n"


def config(base_url: str, **llm) -> SynthesisConfig:
    doc = yaml.safe_load((REPO / "conf" / "synthesis" / "default.yaml").read_text())
    doc.update(generator="llm", domain="swe")
    doc["llm"].update(base_url=base_url, model="fake-coder", retries=0, timeout_s=30, **llm)
    doc["llm"]["validation"].update(timeout_s=60)
    return SynthesisConfig.from_dict(doc)


def run(tmp_path, answers, **llm):
    from trace_train.synthesis.generator import run_llm_stage

    with FakeLLM(answers) as fake:
        results = run_llm_stage([CAP], config(fake.base_url, **llm), tmp_path / "envs", None, source="test")
        return results[0], fake.requests


def test_good_scenario_is_accepted_emitted_and_playable(tmp_path):
    result, requests = run(tmp_path, [answer(scenario())], max_attempts=1)
    assert result.accepted, result.reason
    assert "boundary_conditions" in requests[0]["messages"][1]["content"]
    env_id = result.entry["env_id"]
    assert env_id == "trace/boundary_conditions-swe-v0" and env_id in gym.registry
    out = tmp_path / "envs"
    (row,) = json.loads((out / "manifest.json").read_text())["envs"]
    assert row["generator"] == "llm-swe" and row["provenance"]["model"] == "fake-coder"
    (sc,) = row["scenarios"]
    assert sc["fail_to_pass"] == ["tests/test_bulk.py::test_threshold"]
    assert sc["pass_to_pass"] == ["tests/test_pricing.py::test_eleven", "tests/test_pricing.py::test_small"]
    assert sc["provenance"]["validation"]["before"]["tests/test_bulk.py::test_threshold"] == "FAILED"
    task_dir = out / "swe_scenarios" / "boundary_conditions" / "tasks" / sc["instance_id"]
    assert (task_dir / "gold.patch").read_text().count(NEW.strip()) == 1
    assert (out / "llm_attempts" / "boundary_conditions" / "attempt_1.json").exists()

    env = gym.make(env_id)
    try:
        obs, info = env.reset(seed=0)
        assert "exactly 10 units" in obs[0]["content"] and info["task"]["instance_id"] == sc["instance_id"]
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated and reward == 0.0  # the bug is still there
        env.reset(seed=0)
        obs, *_ = env.step(format_tool_call("str_replace_editor", {"command": "str_replace", "path": "shop/pricing.py",
                                                                    "old_str": OLD, "new_str": NEW}))
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated and reward == 1.0 and info["eval"]["resolution"] == "RESOLVED_FULL"
    finally:
        env.close()


def test_target_test_that_already_passes_is_rejected(tmp_path):
    passing = scenario(target_tests={"tests/test_bulk.py": "from shop import line_total\n\n\ndef test_threshold():\n"
                                                           "    assert line_total(2.0, 11) == 19.8\n"})
    result, requests = run(tmp_path, [answer(passing), answer(scenario(), "Fixed.")], max_attempts=2)
    assert [a.stage for a in result.attempts] == ["dynamic", "accepted"]
    feedback = requests[1]["messages"][-1]["content"]
    assert "already passes before the oracle patch" in feedback and "tests/test_bulk.py::test_threshold" in feedback


def test_oracle_patch_that_breaks_another_test_is_rejected(tmp_path):
    breaking = scenario(oracle_files={"shop/pricing.py": PRICING.replace(
        OLD, "    if quantity == BULK_QUANTITY:")})
    result, _ = run(tmp_path, [answer(breaking)], max_attempts=1)
    assert not result.accepted and result.attempts[0].stage == "dynamic"
    failures = result.attempts[0].report["validation"]["failures"]
    assert failures == ["the oracle patch breaks test tests/test_pricing.py::test_eleven (passes before, FAILED after)"]
    assert not (tmp_path / "envs" / "manifest.json").exists()


@pytest.mark.parametrize("bad, reason", [
    ({"files": {**scenario()["files"], "/tmp/evil.py": "x = 1\n"}}, "is absolute"),
    ({"files": {**scenario()["files"], "../evil.py": "x = 1\n"}}, "escapes the repository"),
    ({"oracle_files": {"shop/../../evil.py": "x = 1\n"}}, "escapes the repository"),
    ({"target_tests": {"tests/../../../tmp/test_x.py": "def test_x():\n    pass\n"}}, "escapes the repository"),
    ({"files": {**scenario()["files"], ".git/hooks/pre-commit.py": "x = 1\n"}}, "not a plain name"),
    ({"files": {**scenario()["files"], "tests/conftest.py": ""}}, "no pytest configuration"),
])
def test_escaping_files_are_rejected_statically(tmp_path, bad, reason):
    result, _ = run(tmp_path, [answer(scenario(**bad))], max_attempts=1)
    assert not result.accepted and result.attempts[0].stage == "static"
    assert any(reason in f for f in result.attempts[0].report["validation"]["failures"])
    assert not (tmp_path / "envs" / "swe_scenarios").exists()
    assert not Path("/tmp/evil.py").exists() and not (tmp_path / "evil.py").exists()


def test_static_checks_on_the_code():
    assert check_scenario(scenario()).ok
    hostile = scenario(files={**scenario()["files"], "shop/net.py": "import socket\n"})
    assert any("import of 'socket'" in p for p in check_scenario(hostile).problems)
    hidden = scenario(files={**scenario()["files"], "shop/x.py": "y = __import__('os')\n"})
    assert any("'__import__'" in p for p in check_scenario(hidden).problems)
    tests_patched = scenario(oracle_files={"tests/test_pricing.py": "def test_small():\n    pass\n"})
    assert any("changes test file" in p for p in check_scenario(tests_patched).problems)
    assert path_problems("shop/pricing.py") == [] and path_problems("C:/x.py")
    assert is_swe_target("swe") and is_swe_target("retail-sim", "trace/swebench-v0")
    assert not is_swe_target("retail-sim", "trace/retail-sim-v0")


def test_static_checks_cover_every_text_that_runs_and_the_tree_shape():
    """The base text of a file the oracle fixes runs (the tests run it before the fix); a scenario file named like a
    standard module would make its import pass the allow-list; a path that is a file and a directory at once
    cannot be written."""
    base = scenario()
    hostile_base = scenario(files={**base["files"], "shop/pricing.py": "import subprocess\n" + PRICING})
    assert "shop/pricing.py" in hostile_base["oracle_files"]
    assert any("import of 'subprocess'" in p for p in check_scenario(hostile_base).problems)
    shadow = scenario(files={**base["files"], "subprocess.py": "x = 1\n",
                             "shop/net.py": "import subprocess\n"})
    assert any("'subprocess' (a file or package of the scenario) shadows" in p
               for p in check_scenario(shadow).problems)
    clash = scenario(files={**base["files"], "shop/pricing.py/notes.md": "notes\n"})
    assert any("is a file and also a directory" in p for p in check_scenario(clash).problems)


def test_an_answer_the_checks_cannot_take_fails_its_attempt_not_the_stage(tmp_path):
    """A lone surrogate (a JSON \\ud800 escape) cannot be hashed or written: that attempt fails at extraction,
    the next answer is asked for, and the conversation goes on."""
    bad = scenario()
    bad["files"] = {**bad["files"], "shop/notes.md": "note \ud800\n"}
    result, requests = run(tmp_path, [answer(bad), answer(scenario())], max_attempts=2)
    assert result.accepted and len(requests) == 2
    first = result.attempts[0]
    assert first.stage == "extract" and "lone surrogate" in first.report["failures"][0]


def test_synthesize_command_writes_a_swe_scenario(tmp_path, capsys):
    from tests.cli_runner import run_cli

    selected = tmp_path / "selected.json"
    selected.write_text(json.dumps({"selected": [{"name": "boundary_conditions", "description": "edges"}]}))
    with FakeLLM([answer(scenario())]) as llm:
        code, out, err = run_cli("synthesize", f"selected={selected}", f"out_dir={tmp_path / 'envs'}",
                               f"out={tmp_path / 'out'}", "synthesis.generator=llm", "synthesis.domain=swe",
                               f"synthesis.llm.base_url={llm.base_url}", "synthesis.llm.model=fake-coder",
                               "synthesis.llm.max_attempts=1", hydra_dir=tmp_path / "hydra", capsys=capsys)
    assert code == 0, out + err
    assert "accepted on attempt 1" in out and "trace/boundary_conditions-swe-v0" in out
    report = json.loads((tmp_path / "out" / "synthesis_report.json").read_text())
    assert report["llm"][0]["env_id"] == "trace/boundary_conditions-swe-v0" and report["emitted"] == []
