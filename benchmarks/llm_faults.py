"""Fault injection on the LLM HTTP clients: what each client does against each kind of broken server.

Usage: python benchmarks/llm_faults.py [--timeout 1.0] [--retries 2] [--backoff 0.1]

Local fake OpenAI servers on 127.0.0.1 inject: HTTP 500, a garbage (non-JSON) body, a hang, a
trickle (one byte every 0.2 s, which no per-read timeout catches), valid JSON with nonsense labels,
and a recovering server (500 once, then a good answer). Each is driven through the labeler's
``ChatClient`` (and ``LLMLabeler`` for labels), the rollout backend's ``JSONHTTPClient`` and, when
tau2 is installed, the τ² LLM user. Prints one row per (fault, client): requests made, outcome, seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.analysis.llm_server import FakeLLMServer, Hang, Trickle, aliases_in, capabilities_in, prompt_of  # noqa: E402
from trace_train.analysis.labels import Capability  # noqa: E402
from trace_train.analysis.llm_client import ChatClient  # noqa: E402
from trace_train.analysis.llm_labeler import LabelCoverageError, LLMLabeler  # noqa: E402
from trace_train.rollout.openai_http import JSONHTTPClient  # noqa: E402
from trace_train.trajectory import TrajectoryRecord  # noqa: E402

CAPS = [Capability("cap_a", "fails when lacking"), Capability("cap_b", "never matters")]
RECORDS = [TrajectoryRecord(env_id="bench/x-v0", seed=i, reward=float(i % 2), success=bool(i % 2),
                            termination="user_stop", messages=[{"role": "user", "content": f"request {i}"},
                                                               {"role": "assistant", "content": f"answer {i}"}])
           for i in range(4)]


def labels_answer(body: dict[str, Any], word: str | None = None) -> str:
    """A labeling answer for the prompt: correct labels, or ``word`` everywhere (nonsense)."""
    prompt = prompt_of(body)
    caps = capabilities_in(prompt) or ["cap_a"]
    return json.dumps({"labels": {a: {c: word or ("PRESENT" if ok else "LACKING") for c in caps}
                                  for a, ok in aliases_in(prompt)}})


def good(body: dict[str, Any], n: int) -> str:
    return labels_answer(body) if aliases_in(prompt_of(body)) else "Hello, I need help with my order."


FAULTS: dict[str, Callable[[dict[str, Any], int], Any]] = {
    "http 500": lambda body, n: (500, json.dumps({"error": {"message": "internal error"}})),
    "garbage body": lambda body, n: (200, "<html>502 Bad Gateway</html>"),
    "hang": lambda body, n: Hang(3600),
    "trickle 1 B/0.2 s": lambda body, n: Trickle(good(body, n), interval_s=0.2),
    "nonsense labels": lambda body, n: labels_answer(body, "banana"),
    "500 then ok": lambda body, n: (500, "warming up") if n == 0 else good(body, n),
}


def drive_labeler(srv: FakeLLMServer, args: argparse.Namespace, cache: Path) -> tuple[int, str]:
    client = ChatClient(srv.base_url, "bench-judge", timeout=args.timeout, retries=args.retries,
                        backoff_s=args.backoff, cache_dir=cache)
    try:
        run = LLMLabeler(client, batch_size=4, label_retries=1).label_run(RECORDS, CAPS, 0)
    except Exception as exc:  # noqa: BLE001 - the outcome is what we report
        return client.requests_made, f"raised {type(exc).__name__}: {_short(exc)}"
    return client.requests_made, f"ok: {len(run)} pairs labelled"


def drive_transport(srv: FakeLLMServer, args: argparse.Namespace, cache: Path) -> tuple[int, str]:
    http = JSONHTTPClient(timeout=args.timeout, retries=args.retries, backoff_s=args.backoff)
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        payload = http.post(srv.base_url + "/chat/completions", body, lambda p: p["choices"][0]["message"]["content"])
    except Exception as exc:  # noqa: BLE001
        return http.requests_made, f"raised {type(exc).__name__}: {_short(exc)}"
    return http.requests_made, f"ok: {len(payload)} chars"


def drive_tau2_user(srv: FakeLLMServer, args: argparse.Namespace, cache: Path) -> tuple[int, str]:
    import gymnasium as gym

    env = gym.make("trace/tau2-retail-llm-v0",
                   user_config={"base_url": srv.base_url, "model": "user", "timeout_s": args.timeout})
    before = len(srv.requests)
    try:
        obs, _ = env.reset(seed=0, options={"task_id": "3"})
    except Exception as exc:  # noqa: BLE001
        return len(srv.requests) - before, f"raised {type(exc).__name__}: {_short(exc)}"
    return len(srv.requests) - before, f"ok: user said {obs[1]['content'][:30]!r}"


def _short(exc: Exception) -> str:
    if isinstance(exc, LabelCoverageError):
        return f"{exc.labelled} of {exc.total} pairs labelled (min {exc.minimum:.0%}); {exc.why.split('; ')[-1]}"
    text = str(exc)
    for marker in ("last error: ", "Why: ", "failed: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.split(" [answer cache")[0][:100]


def outcome(requests: int, result: str) -> str:
    retried = f"retried {requests - 1}x, " if requests > 1 else ""
    if result.startswith("ok") and requests > 1:
        return f"recovered ({retried.rstrip(', ')}); {result[4:]}"
    return retried + result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=1.0, help="total deadline per HTTP attempt, seconds")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--backoff", type=float, default=0.1)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)

    clients = {"labeler": drive_labeler, "rollout transport": drive_transport}
    try:
        from trace_envs.tau2.runtime import tau2_available

        if tau2_available():
            clients["tau2 user"] = drive_tau2_user
    except ImportError:
        pass
    print(f"timeout={args.timeout:g} s (total per attempt), retries={args.retries}, backoff={args.backoff:g} s")
    print(f"{'fault':<19} {'client':<18} {'req':>3} {'secs':>5}  outcome")
    start_all = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for fault, responder in FAULTS.items():
            for name, drive in clients.items():
                if fault == "nonsense labels" and name != "labeler":
                    continue  # label semantics only exist for the labeler
                with FakeLLMServer(responder) as srv:
                    start = time.monotonic()
                    requests, result = drive(srv, args, Path(tmp) / f"{fault}-{name}")
                    secs = time.monotonic() - start
                print(f"{fault:<19} {name:<18} {requests:>3} {secs:>5.1f}  {outcome(requests, result)}")
    print(f"total {time.monotonic() - start_all:.1f} s")


if __name__ == "__main__":
    main()
