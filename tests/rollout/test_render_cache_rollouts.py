"""Seeded rollouts of the shipped tiny base on retail-sim and each family: the same token ids with the render
cache (windowed deltas, memoised ids) on and off, with the checkpoint's template and with one that renders tools."""

from pathlib import Path

import pytest

import trace_envs  # noqa: F401  (registers the env ids)
from trace_train.model.chat_template import chat_template
from trace_train.model.factory import load_policy
from trace_train.model.rendering import ChatRenderer
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend

CHECKPOINT = Path(__file__).resolve().parents[2] / "checkpoints" / "retail-sim-tiny"
ENVS = ["trace/retail-sim-v0", "trace/precondition_verification-v0", "trace/structured_data_reasoning-v0",
        "trace/multi_step_task_completion-v0", "trace/tool_calling_precision-v0", "trace/code_localization-v0"]
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=40)


@pytest.fixture(scope="module")
def policy():
    if not CHECKPOINT.is_dir():
        pytest.skip(f"{CHECKPOINT} is not shipped in this checkout")
    return load_policy(str(CHECKPOINT))


def _play(policy, cached: bool, template: str | None, render_tools: bool):
    model, tok = policy
    backend = HFRolloutBackend(model, tok, max_turns=4, render_tools=render_tools)
    backend.renderer = ChatRenderer(tok, chat_template=template, cached=cached)
    rendered = []  # messages per template render
    real = backend.renderer.text

    def text(messages, tools, gen):
        rendered.append(len(messages))
        return real(messages, tools, gen)

    backend.renderer.text = text
    requests = [EpisodeRequest(env, seed=17 + k, sample_seed=31 * k + i, group=k)
                for k, env in enumerate(ENVS) for i in range(2)]
    return backend.rollout(requests, SAMPLING), sum(rendered)


@pytest.mark.parametrize("style", [None, "full"])  # the checkpoint's own template (tools never rendered), full
def test_rollouts_are_identical_with_the_render_cache_on_and_off(policy, style):
    template = chat_template(style) if style else None
    fast, fast_rendered = _play(policy, True, template, render_tools=style is not None)
    slow, slow_rendered = _play(policy, False, template, render_tools=style is not None)
    assert [r.env_id for r in fast] == [r.env_id for r in slow]
    for a, b in zip(fast, slow):
        assert a.token_ids == b.token_ids, a.env_id
        assert a.loss_mask == b.loss_mask and a.info["turn_spans"] == b.info["turn_spans"]
        assert a.messages == b.messages and a.reward == b.reward
    multi = [r for r in fast if len(r.info["turn_spans"]) >= 2]
    # the delta path ran on several envs. With the tools rendered into its prompt (a template it never saw) the base
    # shipped since session 33 mostly answers in text and the user ends the episode, so fewer envs go multi-turn.
    assert len({r.env_id for r in multi}) >= (3 if style is None else 2)
    assert fast_rendered < slow_rendered / 2  # windows, not whole histories, were rendered
