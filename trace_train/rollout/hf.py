"""``hf`` rollout backend: local transformers model, many episodes advanced together.

Every round, all live episodes (all members of all groups) are advanced by ONE batched generation
(``hf_generate.generate_turn``). Token-in/token-out: each episode keeps its running id list; sampled
completion ids are appended exactly as sampled (mask 1, sampler log-prob recorded), env observations
are appended as chat-template deltas (mask 0) rendered by ``trace_train.model.rendering`` — the same
code behaviour cloning uses. Earlier text is never re-tokenized.

If a turn ends without ``<|im_end|>`` (token budget), an ``<|im_end|>`` is appended with mask 0 so
the stream stays a well-formed chat. Each sampler draws from a ``torch.Generator`` seeded from the
request's env seed and ``sample_seed`` (``sampling.episode_sampler_seed``), so an episode does not depend on the
batch it was played in and episodes of different env seeds never share a random stream. An env that
raises in ``reset``/``step`` ends only its own episode, as ``env_error`` (``trace_train.rollout.base``).
An episode whose first prompt leaves no room in the context ends at once as ``context_limit`` with a
warning (``base.prompt_did_not_fit``; ``trace-rl rollout`` exits non-zero on it); a later turn that does not fit
ends its episode as ``context_limit`` too.

Each episode keeps its KV cache between turns (``keep_cache``): a turn encodes only the tokens added
since the previous one (the observation), and the members of a group encode their shared first
prompt once. ``last_timings`` holds the wall time of the last ``rollout`` split into env work
(reset, step, rendering) and generation. The first rollout of a process calls ``gc.freeze()`` once
(``trace_train.rollout.gc_policy``; ``freeze_gc=False`` opts out), which keeps full garbage
collections from walking the model's and the imports' objects.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import gymnasium
import torch

from trace_envs.core.parsing import assistant_message, parse_assistant_text
from trace_envs.records import TrajectoryRecord, terminal_extras
from trace_train.model.rendering import ChatRenderer
from trace_train.rollout.base import ENV_ERROR, EpisodeRequest, SamplingParams, env_error_info
from trace_train.rollout.gc_policy import freeze_long_lived
from trace_train.rollout.hf_generate import generate_turn
from trace_train.rollout.kv_cache import RowCache
from trace_train.rollout.model_tokens import stop_token_ids
from trace_train.rollout.sampling import episode_sampler_seed, make_generator
from trace_train.threads import torch_threads

logger = logging.getLogger(__name__)


@dataclass
class _Episode:
    request: EpisodeRequest
    env: Any
    tools: list[dict[str, Any]] | None  # as rendered (None when render_tools is off)
    reset_info: dict[str, Any]
    messages: list[dict[str, Any]]
    generator: torch.Generator
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[list[int]] = field(default_factory=list)  # [prompt_len, n_sampled] per turn
    format_ok: list[bool] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    termination: str = ""
    final_info: dict[str, Any] = field(default_factory=dict)
    hint: dict[str, Any] | None = None  # set for hinted members (see HFRolloutBackend._hint_swap)
    kv: RowCache | None = None  # KV of ids[:kv.length] from the previous turn (keep_cache)

    def append(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


def _end_with_env_error(ep: _Episode, exc: Exception, stage: str) -> None:
    """The env raised: this episode ends as a failed ``ENV_ERROR`` trajectory; the batch goes on."""
    req = ep.request
    logger.warning("env %s (seed %d, sample seed %d) raised %s in %s at turn %d; the episode ends as %s",
                   req.env_id, req.seed, req.sample_seed, type(exc).__name__, stage, len(ep.turns), ENV_ERROR,
                   exc_info=exc)
    ep.done, ep.termination, ep.reward = True, ENV_ERROR, 0.0
    ep.final_info = {"success": False, "reward_breakdown": {},
                     "env_error": env_error_info(exc, stage, len(ep.turns))}


def _json_safe(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


@contextmanager
def adapter_scope(model: torch.nn.Module, adapter: str | None) -> Iterator[None]:
    """Activate ``adapter`` on a peft model (``None``: adapters disabled) for the duration."""
    if not _is_peft(model):
        if adapter is not None:
            raise ValueError(f"adapter {adapter!r} requested but the model is not a peft model")
        yield
        return
    if adapter is None:
        with model.disable_adapter():
            yield
        return
    known = list(model.peft_config)
    if adapter not in known:
        raise ValueError(f"unknown adapter {adapter!r}; the model has {known}")
    previous = model.active_adapter
    model.set_adapter(adapter)
    try:
        yield
    finally:
        model.set_adapter(previous)


class HFRolloutBackend:
    """Local transformers rollout backend (see module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        env_factory: Callable[..., Any] = gymnasium.make,
        threads: int = 1,
        device: str = "cpu",
        max_turns: int | None = None,
        max_context: int | None = None,
        max_batch: int | None = None,
        policy_name: str = "hf",
        render_tools: bool = True,
        system_suffix: str = "",
        keep_cache: bool = True,
        freeze_gc: bool = True,
    ) -> None:
        first = next(model.parameters(), None)
        if first is not None and first.device != torch.device(device):
            model = model.to(device)
        self.model = model
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.env_factory = env_factory
        self.threads = threads
        self.device = device
        self.max_turns = max_turns
        config = getattr(model, "config", None)
        self.max_context = max_context or getattr(config, "max_position_embeddings", None) or 2048
        self.max_batch = max_batch
        self.policy_name = policy_name
        self.render_tools = render_tools  # False: tool schemas stay out of the prompt (as in bootstrap BC data)
        self.system_suffix = system_suffix  # appended to the env's system prompt (the "prompted" baseline)
        self.keep_cache = keep_cache  # continue each episode's KV cache across turns
        self.freeze_gc = freeze_gc  # first rollout: gc.freeze() the process's long-lived objects (gc_policy)
        self.last_timings: dict[str, float] = {}
        self._t_generate = 0.0
        self.end_id = self.renderer.end_id
        self.stop_ids = stop_token_ids(self.end_id, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.end_id

    # -- public ---------------------------------------------------------------------------------
    def rollout(
        self, requests: Sequence[EpisodeRequest], sampling: SamplingParams, adapter: str | None = None
    ) -> list[TrajectoryRecord]:
        """Play every request to the end with one batched generation per round."""
        if sampling.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
        if self.freeze_gc:
            freeze_long_lived()  # the model and imports stay out of the collector's full passes
        prev_threads, threads = torch.get_num_threads(), torch_threads(self.threads)
        if prev_threads != threads:  # re-sizing the pool costs; the trainer sets it once per process
            torch.set_num_threads(threads)
        was_training = self.model.training
        self.model.eval()
        episodes: list[_Episode] = []
        self._t_generate = 0.0
        t0 = time.perf_counter()
        try:
            with adapter_scope(self.model, adapter):
                for req in requests:  # appended one by one: a failing start still closes the envs made before it
                    episodes.append(self._start(req))
                while True:
                    live = [ep for ep in episodes if not ep.done]
                    if not live:
                        break
                    chunk = self.max_batch or len(live)
                    for start in range(0, len(live), chunk):
                        self._advance(live[start:start + chunk], sampling)
        finally:
            if prev_threads != threads:
                torch.set_num_threads(prev_threads)
            self.model.train(was_training)
            self._close_envs(episodes)
        wall = time.perf_counter() - t0
        self.last_timings = {"rollout_s": wall, "generate_s": self._t_generate,
                             "env_s": max(wall - self._t_generate, 0.0)}
        return self._records(episodes, adapter)

    # -- shared with the openai backend ---------------------------------------------------------
    @staticmethod
    def _close_envs(episodes: Sequence[_Episode]) -> None:
        for ep in episodes:
            close = getattr(ep.env, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception:  # a failing close must not lose the batch's records
                logger.warning("closing env %s (seed %d) failed", ep.request.env_id, ep.request.seed, exc_info=True)

    def _records(self, episodes: Sequence[_Episode], adapter: str | None) -> list[TrajectoryRecord]:
        policy = self.policy_name if adapter is None else f"{self.policy_name}:{adapter}"
        return [self._record(ep, policy) for ep in episodes]

    # -- internals ------------------------------------------------------------------------------
    def _start(self, req: EpisodeRequest) -> _Episode:
        env = self.env_factory(req.env_id, **req.env_kwargs)  # a bad env id / kwargs fails loudly
        try:
            obs, info = env.reset(seed=req.seed, options=req.reset_options())
        except Exception as exc:
            ep = _Episode(request=req, env=env, tools=None, reset_info={}, messages=[],
                          generator=make_generator(episode_sampler_seed(req.seed, req.sample_seed)))
            _end_with_env_error(ep, exc, "reset")
            return ep
        tools = (info.get("tools") or None) if self.render_tools else None
        messages = self._with_system(list(obs), info.get("system_prompt"))
        ep = _Episode(request=req, env=env, tools=tools, reset_info=dict(info), messages=messages,
                      generator=make_generator(episode_sampler_seed(req.seed, req.sample_seed)))
        try:
            ep.append(self.renderer.prompt_ids(messages, tools), 0)
            if req.hint:  # None when no hint applies to this task: the member played unhinted
                ep.hint = self._hint_swap(req, info, list(obs), tools, len(ep.ids))
            self._check_context(ep)
        except BaseException:  # a caller's error (e.g. a hint the env cannot give): this env is closed too
            self._close_envs([ep])
            raise
        return ep

    def _with_system(self, messages: list[dict[str, Any]], system_prompt: str | None) -> list[dict[str, Any]]:
        system = (system_prompt or "") + self.system_suffix
        if system and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": system})
        return messages

    def _hint_swap(self, req: EpisodeRequest, info: dict[str, Any], obs: list[dict[str, Any]],
                   tools: list[dict[str, Any]] | None, hinted_len: int) -> dict[str, Any] | None:
        """What the trainer needs to swap the hinted prompt for the plain one: the hint, the hinted
        prompt's length and the unhinted prompt's ids (the rest of the stream is the same tokens)."""
        if "unhinted_system_prompt" not in info:
            raise ValueError(f"{req.env_id} was asked for a hint but does not support hints (its reset info has "
                             f"no 'unhinted_system_prompt'; see trace_envs.hints)")
        if obs and obs[0].get("role") == "system":
            obs = [{**obs[0], "content": info["unhinted_system_prompt"]}, *obs[1:]]
        if not info.get("hint"):
            return None
        plain = self._with_system(obs, info["unhinted_system_prompt"])
        return {"text": info["hint"], "hinted_prompt_len": hinted_len,
                "unhinted_prompt_ids": self.renderer.prompt_ids(plain, tools)}

    def _check_context(self, ep: _Episode) -> None:
        if not ep.done and len(ep.ids) >= self.max_context - 1:
            req = ep.request
            logger.warning("the first prompt of %s (seed %d) is %d tokens, but the context holds %d: the episode ends "
                           "as context_limit before its first turn; raise the context (the server's --max-model-len, "
                           "the model's max_position_embeddings, max_context) or shorten the prompt "
                           "(render_tools=false, a shorter system_suffix)", req.env_id, req.seed, len(ep.ids),
                           self.max_context)
            ep.done, ep.termination = True, "context_limit"

    def _advance(self, live: list[_Episode], sampling: SamplingParams) -> None:
        budgets = [min(sampling.max_new_tokens, self.max_context - 1 - len(ep.ids)) for ep in live]
        t0 = time.perf_counter()
        outs = generate_turn(self.model, [ep.ids for ep in live], budgets, sampling,
                             [ep.generator for ep in live], self.stop_ids, self.pad_id, self.device,
                             caches=[ep.kv for ep in live] if self.keep_cache else None)
        self._t_generate += time.perf_counter() - t0
        for ep, out in zip(live, outs):
            ep.kv = out.cache
            self._apply_turn(ep, out.ids, out.logprobs)
            if ep.done:
                ep.kv = None  # free the finished episode's cache

    def _apply_turn(self, ep: _Episode, ids: list[int], logprobs: Sequence[float]) -> None:
        """Append one sampled turn (policy tokens, loss mask 1), close it with the end token if the
        sampler did not (mask 0), and step the env with its text."""
        ep.turns.append([len(ep.ids), len(ids)])
        ep.append(ids, 1, logprobs)
        # any stop token (``<|im_end|>``, or another of the model's eos ids such as Qwen's ``<|endoftext|>``) ends
        # the turn without being part of what the agent said
        text_ids = ids[:-1] if ids and ids[-1] in self.stop_ids else ids
        if not ids or ids[-1] != self.end_id:
            ep.append([self.end_id], 0)
        self._env_step(ep, self.renderer.decode(text_ids))

    def _env_step(self, ep: _Episode, text: str) -> None:
        parsed = parse_assistant_text(text)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if "<tool_call>" in text and parsed.tool_calls:
            message["tool_calls"] = assistant_message(parsed)["tool_calls"]
        ep.messages.append(message)
        try:
            obs, reward, terminated, truncated, info = ep.env.step(text)
            obs = list(obs)
        except Exception as exc:
            ep.format_ok.append(parsed.format_ok)
            _end_with_env_error(ep, exc, "step")
            return
        ep.reward += float(reward)
        ep.format_ok.append(bool(info.get("format_ok", parsed.format_ok)))
        self._sync_call_ids(message, obs)
        if terminated or truncated:
            ep.messages.extend(obs)
            ep.done = True
            ep.termination = str(info.get("termination") or ("terminated" if terminated else "truncated"))
            ep.final_info = dict(info)
            return
        # The stream always ends at the last assistant <|im_end|>: a final observation is kept in
        # ``messages`` but not encoded (it would carry no loss).
        if self.max_turns is not None and len(ep.turns) >= self.max_turns:
            ep.done, ep.termination = True, "max_turns"
        else:
            delta = self.renderer.observation_delta_ids(ep.messages, obs, ep.tools)
            if len(ep.ids) + len(delta) >= self.max_context - 1:
                ep.done, ep.termination = True, "context_limit"
            else:
                ep.append(delta, 0)
        ep.messages.extend(obs)

    @staticmethod
    def _sync_call_ids(message: dict[str, Any], obs: list[dict[str, Any]]) -> None:
        used: set[int] = set()
        for call in message.get("tool_calls", []):
            for k, m in enumerate(obs):
                if k not in used and m.get("role") == "tool" and m.get("name") == call["function"]["name"]:
                    used.add(k)
                    call["id"] = m.get("tool_call_id", call.get("id", ""))
                    break

    def _record(self, ep: _Episode, policy: str) -> TrajectoryRecord:
        info = ep.final_info
        fvf = info.get("format_valid_fraction")
        if fvf is None:
            fvf = sum(ep.format_ok) / len(ep.format_ok) if ep.format_ok else 0.0
        extra = terminal_extras(info)  # the record fields (and the transcript: ``messages``) are not repeated
        return TrajectoryRecord(
            env_id=ep.request.env_id,
            seed=ep.request.seed,
            messages=ep.messages,
            reward=ep.reward,
            success=bool(info.get("success", False)),
            termination=ep.termination,
            policy=policy,
            reward_breakdown={k: float(v) for k, v in (info.get("reward_breakdown") or {}).items()},
            info={
                **_json_safe(extra),  # the env's final info (same keys as the scripted backend records)
                "task": _json_safe(ep.reset_info.get("task")),
                "tools": ep.reset_info.get("tools"),
                "format_valid_fraction": float(fvf),
                "turn_spans": ep.turns,
                "generated_tokens": int(sum(n for _, n in ep.turns)),
                "sample_seed": ep.request.sample_seed,
                "group": ep.request.group,
                **({"hint": ep.hint} if ep.hint is not None else {}),
            },
            token_ids=ep.ids,
            loss_mask=ep.mask,
            logprobs=ep.logprobs,
            episode_id=f"{ep.request.env_id}|{ep.request.seed}|{policy}|{ep.request.sample_seed}",
        )
