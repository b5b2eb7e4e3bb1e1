"""The attempt loop both LLM generators share (``trace_train.synthesis.attempts``), on the paths the end-to-end
tests do not take: an unreachable endpoint stops at once, and a SWE scenario generator that never gets an
extractable answer runs its budget out with the extraction failure as its reason."""

import json
import socket
from pathlib import Path

import yaml
from fake_llm import FakeLLM

from trace_envs.synthesis import SelectedCapability, SynthesisConfig

REPO = Path(__file__).resolve().parents[3]
CAP = SelectedCapability("boundary_conditions", "checks the edges of a range the issue names", mean_delta=0.4)


def swe_config(base_url: str, **llm) -> SynthesisConfig:
    doc = yaml.safe_load((REPO / "conf" / "synthesis" / "default.yaml").read_text())
    doc.update(generator="llm", domain="swe")
    doc["llm"].update(base_url=base_url, model="fake-coder", retries=0, timeout_s=10, **llm)
    return SynthesisConfig.from_dict(doc)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_unreachable_endpoint_stops_after_one_kept_attempt(tmp_path):
    from trace_train.synthesis.swe_generator import synthesize_swe

    (result,) = synthesize_swe([CAP], swe_config(closed_port_url(), max_attempts=3), tmp_path, source="test")
    assert not result.accepted and len(result.attempts) == 1
    assert result.reason.startswith("the LLM endpoint failed: ")
    kept = json.loads((tmp_path / "llm_attempts" / CAP.name / "attempt_1.json").read_text())
    assert kept["stage"] == "llm" and kept["report"]["error"] and kept["prompt"][0]["role"] == "system"
    assert not (tmp_path / "llm_attempts" / CAP.name / "attempt_2.json").exists()


def test_unextractable_answers_run_the_budget_out(tmp_path):
    from trace_train.synthesis.swe_generator import synthesize_swe

    with FakeLLM(["I would rather not."]) as fake:
        (result,) = synthesize_swe([CAP], swe_config(fake.base_url, max_attempts=2), tmp_path, source="test")
        requests = fake.requests
    assert [a.stage for a in result.attempts] == ["extract", "extract"] and not result.accepted
    assert result.reason == ("no scenario accepted in 2 attempts; last failure at extract: "
                             "the answer holds no fenced ```json block")
    retry = requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I would rather not."}
    assert retry[-1]["content"].startswith("Your answer was rejected: the answer holds no fenced ```json block.")
    assert "one JSON object in a fenced ```json block" in retry[-1]["content"]
    assert result.attempts[0].prompt_sha256 != result.attempts[1].prompt_sha256
    for index in (1, 2):
        assert (tmp_path / "llm_attempts" / CAP.name / f"attempt_{index}.json").exists()
    assert result.entry is None and not (tmp_path / "manifest.json").exists()


def test_an_empty_answer_is_a_failed_attempt_not_the_end(tmp_path):
    from trace_train.synthesis.swe_generator import synthesize_swe

    with FakeLLM(["", "I would rather not."]) as fake:
        (result,) = synthesize_swe([CAP], swe_config(fake.base_url, max_attempts=2), tmp_path, source="test")
        requests = fake.requests
    assert [a.stage for a in result.attempts] == ["extract", "extract"] and len(requests) == 2
    first = json.loads((tmp_path / "llm_attempts" / CAP.name / "attempt_1.json").read_text())
    assert "empty answer" in first["report"]["failures"][0]
    assert requests[1]["messages"][-1]["content"].startswith("Your answer was rejected: ")
    assert result.reason.endswith("the answer holds no fenced ```json block")


def test_checks_that_raise_on_an_answer_fail_that_attempt_and_the_conversation_goes_on(tmp_path):
    """Whatever an answer makes the checks raise (a path the validator cannot create, a surrogate it cannot
    write) is that attempt's failure, kept with its traceback, and the next answer is asked for; a lone
    surrogate in an answer is fed back as text UTF-8 can carry."""
    from trace_train.synthesis.attempts import AttemptSteps, run_attempts

    class Client:
        model, endpoint = "stub", "http://stub"

        def __init__(self):
            self.seen = []

        def complete(self, messages, seed=None):
            self.seen.append(messages)
            return ["first \ud800 answer", "second answer"][len(self.seen) - 1]

    def check(artefact, attempt):
        if artefact == "first":
            raise FileExistsError("shop/pricing.py")
        attempt.stage, attempt.accepted = "accepted", True
        return None

    steps = AttemptSteps(generator="stub", label="stub generator", noun="thing",
                         extract=lambda text: text.split()[0], check=check, provenance=lambda a: {},
                         emit=lambda artefact, attempt, provenance: {"id": artefact},
                         retry=lambda feedback: {"role": "user", "content": feedback})
    client = Client()
    result = run_attempts(CAP, 3, client, [{"role": "user", "content": "go"}], tmp_path, steps)
    assert result.accepted and result.entry == {"id": "second"}
    first = result.attempts[0]
    assert first.stage == "check" and first.report["failures"] == ["checking it raised FileExistsError: "
                                                                   "shop/pricing.py"]
    assert "Traceback" in first.report["traceback"]
    assert client.seen[1][-1]["content"].startswith("Your answer was rejected: checking it raised FileExistsError")
    assert "\ud800" not in client.seen[1][-2]["content"] and client.seen[1][-2]["content"].startswith("first ")
    kept = json.loads((tmp_path / "attempt_1.json").read_text())
    assert kept["stage"] == "check"
