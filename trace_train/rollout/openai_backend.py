"""``openai`` rollout backend: episodes sampled by OpenAI-compatible servers (vLLM), token-in/token-out.

The token stream of an episode is built exactly as the ``hf`` backend builds it (the episode
bookkeeping — env reset, observation deltas from ``ChatRenderer``, env steps, an env that raises
ending its episode as ``env_error``, the record — is the ``hf`` backend's own code): each turn sends
the episode's running id list as a token-id prompt to ``POST /v1/completions`` with
``return_token_ids`` and ``logprobs``, so the server never re-renders or re-tokenizes text. The
completion ids (ending with a stop token: ``<|im_end|>`` or another eos id of the served model's
generation config, as in the ``hf`` backend) are recorded as returned with mask 1 and
the server's log-probs; a turn cut by the token budget gets an ``<|im_end|>`` with mask 0. Each
request carries a seed derived from the episode's env seed, the member's ``sample_seed`` and the turn index.

Every episode sticks to one server (``routing``: ``least_loaded`` — fewest live episodes, then fewest
assigned so far — or ``round_robin``); all live episodes advance concurrently, one request each per
round, through a thread pool. Server failures raise ``RolloutServerError`` (URL + last error) after
the configured retries; there is no fallback to another backend. LoRA hot-swap and server checks
live in ``trace_train.rollout.openai_lora``.

Log-probs: vLLM reports those of the raw model distribution by default; the ``hf`` backend records
``log_softmax(logits / T)``. They agree at ``T = 1``; for ``T != 1`` with GRPO's
``old_logprobs=sampler``, start vLLM with ``--logprobs-mode processed_logprobs`` (and ``top_p = 1``).
"""

from __future__ import annotations

import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import gymnasium
import numpy as np

from trace_envs.llm_http import BadResponseError, JSONHTTPClient, ServerError
from trace_envs.records import TrajectoryRecord
from trace_train.model.rendering import ChatRenderer
from trace_train.rollout.base import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend, _Episode
from trace_train.rollout.model_tokens import ModelFiles, load_model_files, stop_token_ids
from trace_train.rollout.openai_lora import AdapterManager, ServerInfo, check_servers
from trace_train.rollout.sampling import episode_sampler_seed

logger = logging.getLogger(__name__)

ROUTINGS = ("least_loaded", "round_robin")
DEFAULT_MAX_CONTEXT = 2048


class RolloutServerError(ServerError):
    """A rollout server failed (unreachable, kept failing, or answered without what we need)."""


@dataclass(frozen=True)
class Completion:
    """One sampled turn as the server returned it."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str | None
    prompt_ids: list[int] | None = None


LOGPROB_TOLERANCE = 1e-3  # a sampler log-prob may read a hair above 0 from float rounding, never more


def _is_token_id(value: Any) -> bool:
    return type(value) is int and value >= 0  # bool is an int subclass, and no JSON token id is negative


def _is_logprob(value: Any) -> bool:
    return (type(value) in (int, float) and math.isfinite(value) and value <= LOGPROB_TOLERANCE)


def parse_completion(payload: Any, vocab_size: int | None = None) -> Completion:
    """The first choice of a ``/v1/completions`` answer; ``BadResponseError`` if ids/log-probs are missing or
    impossible (a negative or non-integer id, an id ``>= vocab_size``, a log-prob that is not a finite number
    <= 0)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or not payload["choices"]:
        raise BadResponseError("no choices in the completion response")
    choice = payload["choices"][0]
    if not isinstance(choice, dict):
        raise BadResponseError(f"the completion's first choice is a {type(choice).__name__}, not an object")
    ids = choice.get("token_ids")
    if not isinstance(ids, list) or not all(_is_token_id(t) for t in ids):
        raise BadResponseError("the completion has no token_ids (a list of non-negative integers): the server must "
                               "support 'return_token_ids' (vLLM >= 0.10.2)")
    if vocab_size is not None and ids and max(ids) >= vocab_size:
        bad = next(t for t in ids if t >= vocab_size)
        raise BadResponseError(f"the completion has token id {bad}, outside the model's vocabulary of {vocab_size} "
                               f"(is the server serving another model than the local tokenizer's?)")
    logprobs = choice.get("logprobs")
    lps = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(lps, list) or len(lps) != len(ids) or not all(_is_logprob(x) for x in lps):
        raise BadResponseError(f"the completion's logprobs.token_logprobs does not give one finite log-prob <= 0 "
                               f"per token ({len(ids)} token ids)")
    prompt = choice.get("prompt_token_ids")
    return Completion(list(ids), [float(x) for x in lps], choice.get("finish_reason"),
                      list(prompt) if isinstance(prompt, list) else None)


def turn_seed(episode_seed: int, turn: int) -> int:
    """The server-side sampler seed of turn ``turn`` of the episode whose sampler seed is ``episode_seed``
    (``sampling.episode_sampler_seed`` of its env seed and sample seed; 31 bits)."""
    state = np.random.SeedSequence([int(episode_seed) & 0xFFFF_FFFF_FFFF_FFFF, int(turn)]).generate_state(1)
    return int(state[0] >> 1)


class _Router:
    """Sticky server assignment; thread-safe, state kept across ``rollout`` calls."""

    def __init__(self, n: int, routing: str) -> None:
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        self.routing = routing
        self.live = [0] * n
        self.assigned = [0] * n
        self._next = 0
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            if self.routing == "round_robin":
                k = self._next % len(self.live)
                self._next += 1
            else:
                k = min(range(len(self.live)), key=lambda i: (self.live[i], self.assigned[i], i))
            self.live[k] += 1
            self.assigned[k] += 1
            return k

    def release(self, k: int) -> None:
        with self._lock:
            self.live[k] -= 1


class OpenAIRolloutBackend:
    """Rollout backend over one or more OpenAI-compatible servers (see module docstring).

    ``base_urls`` include the API prefix (``http://host:port/v1``); ``model`` is the served base
    model name; ``tokenizer`` must be the served model's tokenizer (it renders prompts locally).
    ``load_inplace`` picks the hot-swap mode of ``sync_adapter``.
    """

    # The episode bookkeeping is the hf backend's, so both produce identical records.
    _start = HFRolloutBackend._start
    _with_system = HFRolloutBackend._with_system
    _hint_swap = HFRolloutBackend._hint_swap
    _check_context = HFRolloutBackend._check_context
    _apply_turn = HFRolloutBackend._apply_turn
    _env_step = HFRolloutBackend._env_step
    _sync_call_ids = staticmethod(HFRolloutBackend._sync_call_ids)
    _record = HFRolloutBackend._record
    _close_envs = staticmethod(HFRolloutBackend._close_envs)
    _records = HFRolloutBackend._records

    def __init__(
        self,
        base_urls: Sequence[str] | str,
        model: str,
        tokenizer: Any,
        routing: str = "least_loaded",
        timeout: float = 300.0,
        retries: int = 3,
        backoff: float = 1.0,
        max_concurrency: int = 32,
        api_key: str = "EMPTY",
        load_inplace: bool = False,
        env_factory: Callable[..., Any] = gymnasium.make,
        max_turns: int | None = None,
        max_context: int | None = None,
        policy_name: str = "openai",
        render_tools: bool = True,
        system_suffix: str = "",
        sleep: Callable[[float], None] | None = None,
        model_files: ModelFiles | None = None,
    ) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("OpenAIRolloutBackend needs at least one base URL")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_urls = [u.rstrip("/") for u in urls]
        self.model = model
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.end_id = self.renderer.end_id
        # ``model_files``: the served model's generation config and vocabulary size (default: read from the
        # tokenizer's directory); its eos ids end a turn as they do in the hf backend
        files = model_files if model_files is not None else load_model_files(getattr(tokenizer, "name_or_path", None))
        self.stop_ids = stop_token_ids(self.end_id, files.generation_config)
        self.vocab_size = files.vocab_size or len(tokenizer)
        self.router = _Router(len(self.base_urls), routing)
        http_kw: dict[str, Any] = {"api_key": api_key, "timeout": timeout, "retries": retries, "backoff_s": backoff}
        if sleep is not None:
            http_kw["sleep"] = sleep
        self.http = JSONHTTPClient(**http_kw)
        self.max_concurrency = max_concurrency
        self.env_factory = env_factory
        self.max_turns = max_turns
        self._max_context = max_context
        self.policy_name = policy_name
        self.render_tools = render_tools
        self.system_suffix = system_suffix
        self.adapters = AdapterManager(self.http, self.base_urls, load_inplace, RolloutServerError)
        self.servers: list[ServerInfo] | None = None
        self._lora_checked = False

    # -- server management ----------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        if self._max_context is not None:
            return self._max_context
        lens = [s.max_model_len for s in self.servers or [] if s.max_model_len]
        return min(lens) if lens else DEFAULT_MAX_CONTEXT

    def check_server(self, adapters: bool = False) -> list[ServerInfo]:
        """Check every server: reachable, serving ``model``, and (``adapters``) runtime LoRA loading on."""
        self.servers = check_servers(self.http, self.base_urls, self.model, adapters, RolloutServerError)
        self._lora_checked = self._lora_checked or adapters
        return self.servers

    def sync_adapter(self, name: str, path: str, iteration: int | None = None) -> str:
        """Load adapter ``path`` on every server; returns the name to sample with (see ``AdapterManager``).

        The first call checks the servers (with the LoRA probe) so a misconfigured server says what is missing.
        """
        if not self._lora_checked:
            self.check_server(adapters=True)
        return self.adapters.sync(name, path, iteration)

    # -- rollout --------------------------------------------------------------------------------
    def rollout(
        self, requests: Sequence[EpisodeRequest], sampling: SamplingParams, adapter: str | None = None
    ) -> list[TrajectoryRecord]:
        """Play every request to the end; one request per live episode per round, concurrently."""
        if sampling.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
        if self.servers is None:
            self.check_server()
        served = adapter or self.model
        episodes: list[_Episode] = []
        servers: list[int] = []
        held: set[int] = set()
        try:
            for req in requests:
                episodes.append(self._start(req))
                servers.append(self.router.acquire())
                held.add(len(servers) - 1)
            workers = max(1, min(self.max_concurrency, len(episodes)))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout-http") as pool:
                while True:
                    for i in sorted(held):
                        if episodes[i].done:
                            self.router.release(servers[i])
                            held.discard(i)
                    live = [i for i in range(len(episodes)) if not episodes[i].done]
                    if not live:
                        break
                    self._advance(pool, [(episodes[i], servers[i]) for i in live], sampling, served)
        finally:
            for i in held:
                self.router.release(servers[i])
            self._close_envs(episodes)
        return self._records(episodes, adapter)

    def _body(self, ep: _Episode, served: str, budget: int, sampling: SamplingParams) -> dict[str, Any]:
        greedy = sampling.greedy or sampling.temperature <= 0.0
        req = ep.request
        return {
            "model": served,
            "prompt": list(ep.ids),
            "max_tokens": budget,
            "temperature": 0.0 if greedy else float(sampling.temperature),
            "top_p": 1.0 if greedy else float(sampling.top_p),
            "seed": turn_seed(episode_sampler_seed(req.seed, req.sample_seed), len(ep.turns)),
            "logprobs": 0,
            "return_token_ids": True,
            "stop_token_ids": sorted(self.stop_ids),
            "skip_special_tokens": False,
            "user": f"{req.env_id}|{req.seed}|{req.sample_seed}",
        }

    def complete(self, server: int, body: dict[str, Any]) -> Completion:
        """One ``/v1/completions`` call on server ``server`` (retried; checked)."""
        url = f"{self.base_urls[server]}/completions"
        out = self.http.post(url, body, partial(parse_completion, vocab_size=self.vocab_size),
                             error=RolloutServerError)
        if out.prompt_ids is not None and out.prompt_ids != body["prompt"]:
            raise RolloutServerError(f"POST {url}: the server changed the token-id prompt "
                                     f"({len(body['prompt'])} ids sent, {len(out.prompt_ids)} echoed)", url)
        if len(out.ids) > body["max_tokens"]:
            raise RolloutServerError(f"POST {url}: {len(out.ids)} tokens for max_tokens={body['max_tokens']}", url)
        return out

    def _advance(self, pool: ThreadPoolExecutor, live: list[tuple[_Episode, int]], sampling: SamplingParams,
                 served: str) -> None:
        futures = []
        for ep, server in live:
            budget = min(sampling.max_new_tokens, self.max_context - 1 - len(ep.ids))
            futures.append(pool.submit(self.complete, server, self._body(ep, served, budget, sampling)))
        outs = [f.result() for f in futures]
        for (ep, _), out in zip(live, outs):
            self._apply_turn(ep, out.ids, out.logprobs)
