"""A local OpenAI-compatible server that really samples from a tiny HF model (tests only).

Serves ``GET /v1/models``, ``POST /v1/completions`` (token-id prompts, ``return_token_ids``,
``logprobs``, ``seed``, ``stop_token_ids``) and vLLM's ``/v1/load_lora_adapter`` /
``/v1/unload_lora_adapter`` (adapters are loaded with peft and used when ``model`` names them),
with vLLM's status codes and error texts. ``hook(path, body, n)`` may inject faults: return
``(status, raw_body)`` to answer with that, a float to sleep that long first, or a
``tests.analysis.llm_server.Trickle`` to send the normal answer one byte every ``interval_s``.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import torch

from tests.analysis.llm_server import Trickle, trickle_response
from trace_train.grpo.lora import load_adapter, load_adapter_weights
from trace_train.rollout.base import SamplingParams
from trace_train.rollout.hf import adapter_scope
from trace_train.rollout.hf_generate import generate_turn
from trace_train.rollout.sampling import make_generator

Hook = Callable[[str, dict, int], "tuple[int, str] | float | Trickle | None"]


class FakeOpenAIServer:
    def __init__(self, model: torch.nn.Module, tokenizer: Any, served: str = "tiny", hook: Hook | None = None,
                 runtime_lora: bool = True, lora_enabled: bool = True, max_model_len: int = 4096) -> None:
        self.model = copy.deepcopy(model).eval()
        self.tokenizer = tokenizer
        self.served = served
        self.hook = hook
        self.runtime_lora = runtime_lora
        self.lora_enabled = lora_enabled
        self.max_model_len = max_model_len
        self.adapters: dict[str, str] = {}
        self.log: list[tuple[str, dict]] = []  # (path, body) in arrival order
        self._lock = threading.Lock()
        self._gen_lock = threading.Lock()
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer._handle(self, "GET")

            def do_POST(self):
                outer._handle(self, "POST")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def paths(self) -> list[str]:
        return [p for p, _ in self.log]

    # -- dispatch -------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        with self._lock:
            n = len(self.log)
            self.log.append((handler.path, body))
        status, text = 200, ""
        fault = self.hook(handler.path, body, n) if self.hook else None
        if isinstance(fault, (int, float)) and not isinstance(fault, bool):
            time.sleep(float(fault))
            fault = None
        if isinstance(fault, Trickle):
            status, text = self._route(method, handler.path, body)
            trickle_response(handler, status, text.encode(), fault.interval_s, self._stop)
            return
        if fault is not None:
            status, text = fault
        else:
            status, text = self._route(method, handler.path, body)
        data = text.encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    def _route(self, method: str, path: str, body: dict) -> tuple[int, str]:
        if method == "GET" and path == "/v1/models":
            cards = [{"id": self.served, "object": "model", "max_model_len": self.max_model_len}]
            cards += [{"id": name, "object": "model", "parent": self.served, "root": p}
                      for name, p in self.adapters.items()]
            return 200, json.dumps({"object": "list", "data": cards})
        if method == "POST" and path == "/v1/completions":
            return self._complete(body)
        if method == "POST" and path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and self.runtime_lora:
            return self._lora(path, body)
        return 404, json.dumps({"detail": "Not Found"})

    @staticmethod
    def _error(status: int, message: str) -> tuple[int, str]:
        return status, json.dumps({"error": {"message": message, "type": "BadRequestError", "code": status}})

    # -- LoRA -----------------------------------------------------------------------------------
    def _lora(self, path: str, body: dict) -> tuple[int, str]:
        name = body.get("lora_name")
        if path.endswith("unload_lora_adapter"):
            if name not in self.adapters:
                return self._error(404, f"The lora adapter '{name}' cannot be found.")
            del self.adapters[name]
            return 200, f"Success: LoRA adapter '{name}' removed successfully."
        if not body.get("load_inplace") and name in self.adapters:
            return self._error(400, f"The lora adapter '{name}' has already been loaded. If you want to load the "
                                    "adapter in place, set 'load_inplace' to True.")
        if not self.lora_enabled:
            return self._error(500, "LoRA is not enabled. Use --enable-lora to enable LoRA.")
        lora_path = body.get("lora_path", "")
        if not (Path(lora_path) / "adapter_config.json").exists():
            return self._error(404, f"Loading lora {name} failed: No adapter found for {lora_path}")
        with self._gen_lock:
            known = getattr(self.model, "peft_config", {})
            if name in known:
                load_adapter_weights(self.model, name, lora_path)
            else:
                self.model = load_adapter(self.model, lora_path, name)
        self.adapters[name] = lora_path
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    # -- sampling -------------------------------------------------------------------------------
    def _complete(self, body: dict) -> tuple[int, str]:
        model_name, prompt = body.get("model"), body.get("prompt")
        if model_name != self.served and model_name not in self.adapters:
            return self._error(404, f"The model `{model_name}` does not exist.")
        if not isinstance(prompt, list) or not prompt:
            return self._error(400, "prompt must be a non-empty list of token ids")
        max_tokens = int(body.get("max_tokens", 16))
        if len(prompt) + max_tokens > self.max_model_len:
            return self._error(400, "This model's maximum context length is exceeded")
        temperature = float(body.get("temperature", 1.0))
        sampling = SamplingParams(temperature=temperature, top_p=float(body.get("top_p", 1.0)),
                                  max_new_tokens=max_tokens, greedy=temperature == 0.0)
        stops = set(body.get("stop_token_ids") or []) | {self.tokenizer.eos_token_id}
        gen = make_generator(int(body.get("seed") or 0))
        adapter = None if model_name == self.served else model_name
        with self._gen_lock, torch.no_grad(), adapter_scope(self.model, adapter):
            (out,) = generate_turn(self.model, [prompt], [max_tokens], sampling, [gen], stops,
                                   self.tokenizer.pad_token_id, "cpu")
        choice: dict[str, Any] = {
            "index": 0, "text": self.tokenizer.decode(out.ids),
            "finish_reason": "stop" if out.stopped else "length", "stop_reason": None,
        }
        if body.get("logprobs") is not None:
            choice["logprobs"] = {"token_logprobs": out.logprobs, "tokens": [str(t) for t in out.ids],
                                  "top_logprobs": [], "text_offset": []}
        if body.get("return_token_ids"):
            choice["token_ids"], choice["prompt_token_ids"] = out.ids, prompt
        return 200, json.dumps({"id": "cmpl-x", "object": "text_completion", "model": model_name,
                                "choices": [choice]})
