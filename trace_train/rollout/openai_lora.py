"""Server checks and LoRA hot-swap for OpenAI-compatible (vLLM) rollout servers.

Hot-swap (``AdapterManager.sync``), after each policy update:

* versioned (default): ``POST /v1/load_lora_adapter {"lora_name": "<name>@<iter>", "lora_path"}`` on
  every server, then ``POST /v1/unload_lora_adapter`` of the previous version on every server.
  A new name gets a new LoRA id in vLLM, so no prefix-cache block computed with old weights is reused.
* ``load_inplace``: ``{"lora_name": "<name>", "load_inplace": true}`` replaces the weights under one
  stable name. vLLM keeps prefix-cache blocks of the old weights when the *path* is unchanged, so
  each version must come from a new directory (the GRPO trainer writes ``adapters/<name>/v<iter>``).

Runtime LoRA loading needs the server started with ``--enable-lora --max-lora-rank R --max-loras N``
and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` in its environment; ``check_servers(adapters=True)``
probes for both and says which is missing.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.llm_http import BadResponseError, JSONHTTPClient, ServerError

logger = logging.getLogger(__name__)

PROBE_NAME = "__trace_rl_probe__"
LORA_FLAGS = "--enable-lora --max-lora-rank <r> --max-loras <n>"
LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"


@dataclass(frozen=True)
class ServerInfo:
    """What ``GET /v1/models`` told about one server."""

    base_url: str
    models: list[str]
    max_model_len: int | None = None
    adapters: list[str] = field(default_factory=list)


def _models(payload: Any) -> list[dict[str, Any]]:
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
        raise BadResponseError("expected {'data': [{'id': ...}, ...]}")
    return data


def check_servers(http: JSONHTTPClient, base_urls: list[str], model: str, adapters: bool,
                  error: type[ServerError]) -> list[ServerInfo]:
    """Every server reachable, serving ``model``; with ``adapters``, runtime LoRA loading enabled."""
    infos = []
    for base in base_urls:
        cards = http.get(f"{base}/models", _models, error=error)
        ids = [str(c["id"]) for c in cards]
        base_card = next((c for c in cards if c["id"] == model), None)
        if base_card is None:
            raise error(f"{base}: the server does not serve model {model!r}; it serves {ids}. Start it with "
                        f"--served-model-name {model} or set the policy's served model name.", base)
        mml = base_card.get("max_model_len")
        parent = [str(c["id"]) for c in cards if c.get("parent") == model]
        infos.append(ServerInfo(base, ids, int(mml) if isinstance(mml, int) else None, parent))
        if adapters:
            probe_lora(http, base, error)
    return infos


def probe_lora(http: JSONHTTPClient, base: str, error: type[ServerError]) -> None:
    """Load a non-existent adapter: 'not found' means runtime loading works; else say what is missing."""
    url = f"{base}/load_lora_adapter"
    body = {"lora_name": PROBE_NAME, "lora_path": f"/nonexistent/{PROBE_NAME}"}
    try:
        http.post(url, body, raw=True, error=error, retries=0)
    except ServerError as exc:
        text, detail = str(exc), exc.detail.lower()
        if "no adapter found" in detail or (PROBE_NAME in exc.detail and "not" in detail):
            return  # endpoint present and LoRA enabled: only our fake path is missing
        if exc.status == 404:
            raise error(f"{base}: runtime LoRA updating is disabled ({url} does not exist). Start the server "
                        f"with {LORA_ENV} in its environment (and {LORA_FLAGS}).", base, 404) from exc
        if "enable-lora" in detail or "lora is not enabled" in detail:
            raise error(f"{base}: the server was started without LoRA support. Start it with {LORA_FLAGS} "
                        f"(and {LORA_ENV}).", base, exc.status) from exc
        raise error(f"{base}: LoRA probe failed unexpectedly: {text}", base, exc.status) from exc
    raise error(f"{base}: the LoRA probe loaded a non-existent adapter path; the server cannot be trusted "
                f"to report adapter errors", base)


def parse_version(name: str, path: str, iteration: int | None) -> tuple[str, int]:
    """``(base_name, iteration)`` from ``name@iter``, else ``iteration``, else the path's ``v<iter>`` suffix."""
    base, sep, tail = name.partition("@")
    if sep:
        if not tail.isdigit():
            raise ValueError(f"adapter name {name!r}: expected <name>@<iteration>")
        return base, int(tail)
    if iteration is not None:
        return base, int(iteration)
    match = re.search(r"(\d+)$", Path(path).name)
    if match is None:
        raise ValueError(f"cannot tell the iteration of adapter {name!r} from {path!r}; pass iteration=")
    return base, int(match.group(1))


class AdapterManager:
    """Keeps one version of each adapter loaded on every server (see module docstring)."""

    def __init__(self, http: JSONHTTPClient, base_urls: list[str], load_inplace: bool,
                 error: type[ServerError]) -> None:
        self.http, self.base_urls, self.load_inplace, self.error = http, base_urls, load_inplace, error
        self.loaded: dict[str, tuple[str, str]] = {}  # base name -> (served name, path)
        self._lock = threading.Lock()

    def _load(self, served: str, path: str, inplace: bool) -> None:
        body: dict[str, Any] = {"lora_name": served, "lora_path": path}
        if inplace:
            body["load_inplace"] = True
        for base in self.base_urls:
            url = f"{base}/load_lora_adapter"
            try:
                self.http.post(url, body, raw=True, error=self.error)
            except ServerError as exc:  # the name is left over from an earlier run: replace its weights
                if inplace or exc.status != 400 or "already been loaded" not in exc.detail:
                    raise
                logger.warning("%s: adapter %s was already loaded; replacing it in place", base, served)
                self.http.post(url, {**body, "load_inplace": True}, raw=True, error=self.error)

    def _unload(self, served: str) -> None:
        for base in self.base_urls:
            try:
                self.http.post(f"{base}/unload_lora_adapter", {"lora_name": served}, raw=True, error=self.error)
            except ServerError as exc:
                if exc.status != 404:
                    raise
                logger.warning("%s: adapter %s was not loaded (nothing to unload)", base, served)

    def sync(self, name: str, path: str, iteration: int | None = None) -> str:
        """Load ``path`` as the current version of ``name`` on every server; returns the served name."""
        base, it = parse_version(name, path, iteration)
        path = str(Path(path).resolve())
        if not Path(path).is_dir():
            raise FileNotFoundError(f"adapter directory {path} does not exist")
        with self._lock:
            previous = self.loaded.get(base)
            if self.load_inplace:
                if previous is not None and previous[1] == path:
                    logger.warning("adapter %s reloaded in place from the same path %s: the servers may reuse "
                                   "prefix-cache blocks of the old weights", base, path)
                self._load(base, path, inplace=True)
                self.loaded[base] = (base, path)
                return base
            served = f"{base}@{it}"
            if previous is not None and previous[0] == served:  # re-sync of the same version (e.g. resume)
                self._load(served, path, inplace=True)
            else:
                self._load(served, path, inplace=False)
                if previous is not None:
                    self._unload(previous[0])
            self.loaded[base] = (served, path)
            logger.info("adapter %s now served as %s from %s", base, served, path)
            return served
