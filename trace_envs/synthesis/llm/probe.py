"""The dynamic check of a candidate env module, run *inside* the confined subprocess (never in the host).

``python -I -m trace_envs.synthesis.llm.probe <config.json>`` imports the module, registers it and
plays it; it measures, the host judges (``validate.py``). Output on the real stdout: progress lines
``<nonce> PHASE <what>`` (so a timeout says where the module hung) and one final ``<nonce> REPORT
<json>``. What the module prints is captured and dropped.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math
import os
import re
import sys
import traceback
from typing import Any

_ID_TOKEN = re.compile(r"[#A-Za-z0-9_@.\-]{3,40}")
CANDIDATE_ID = "trace/llm-candidate-v0"


class _Probe:
    def __init__(self, cfg: dict[str, Any], out: io.TextIOBase):
        self.cfg, self.out, self.nonce = cfg, out, cfg["nonce"]
        self.rewards: list[float] = []
        self.verifier_rewards: list[float] = []
        self.last = "start"

    def phase(self, what: str) -> None:
        self.last = what
        self.out.write(f"{self.nonce} PHASE {what}\n")
        self.out.flush()

    def report(self, doc: dict[str, Any]) -> None:
        self.out.write(f"{self.nonce} REPORT {json.dumps(doc, default=str)}\n")
        self.out.flush()

    # -- episodes ------------------------------------------------------------------------------
    def episode(self, env: Any, seed: int, policy: str) -> dict[str, Any]:
        import numpy as np

        obs, info = env.reset(seed=seed)
        if policy == "oracle":
            turns = iter(env.unwrapped.oracle_turns())
        rng = np.random.default_rng([seed, 7919])
        seen = " ".join(str(m.get("content", "")) for m in obs)
        reward, final, n = 0.0, {}, 0
        while True:
            n += 1
            if policy == "oracle":
                action = next(turns, "###STOP###")
            elif policy == "null":
                action = "###STOP###"
            else:
                action = _random_call(info["tools"], rng, seen) if n <= self.cfg["random_turns"] else "###STOP###"
            obs, reward, terminated, truncated, final = env.step(action)
            seen += " " + " ".join(str(m.get("content", "")) for m in obs)
            if terminated or truncated:
                break
        reward = float(reward)
        self.rewards.append(reward)
        if final.get("termination") in ("user_stop", "agent_stop", "transfer"):
            self.verifier_rewards.append(reward)
        return {"seed": seed, "reward": reward, "success": bool(final.get("success", False)),
                "termination": final.get("termination"), "transcript": _digest(env.unwrapped.transcript)}

    def run(self) -> dict[str, Any]:
        import gymnasium as gym
        from gymnasium.utils.env_checker import check_env

        from trace_envs.synthesis.llm.authoring import CapabilityEnv

        cfg = self.cfg
        self.phase("import the module")
        spec = importlib.util.spec_from_file_location("trace_llm_candidate", cfg["module_path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cls = getattr(module, "Env", None)
        if not (isinstance(cls, type) and issubclass(cls, CapabilityEnv)):
            return {"error": {"phase": "import", "message": "the module's Env is not a CapabilityEnv subclass"}}
        self.phase("register and make")
        gym.registry.pop(CANDIDATE_ID, None)
        gym.register(id=CANDIDATE_ID, entry_point=cls, kwargs={"domain": cfg["domain"]})
        env = gym.make(CANDIDATE_ID)
        self.phase("check_env")
        check_env(env.unwrapped, skip_render_check=True)
        self.phase("reset(seed=0)")
        _, info = env.reset(seed=0)
        doc: dict[str, Any] = {"tools": info["tools"], "capability": getattr(cls, "capability", "")}
        self.phase("determinism")
        distinct, nondeterministic = set(), []
        for seed in range(cfg["determinism_seeds"]):
            self.phase(f"determinism reset(seed={seed})")
            first = _digest(env.reset(seed=seed))
            second = _digest(env.reset(seed=seed))
            a, b = self.episode(env, seed, "oracle"), self.episode(env, seed, "oracle")
            if first != second or a["transcript"] != b["transcript"] or a["reward"] != b["reward"]:
                nondeterministic.append(seed)
            distinct.add(first)
        doc["determinism"] = {"seeds": cfg["determinism_seeds"], "distinct": len(distinct),
                              "nondeterministic_seeds": nondeterministic}
        results = {}
        for policy, n in (("oracle", cfg["n_seeds"]), ("null", cfg["baseline_seeds"]),
                          ("random", cfg["baseline_seeds"])):
            rows = []
            for seed in range(n):
                self.phase(f"{policy} policy, seed {seed}")
                rows.append(self.episode(env, seed, policy))
            failed = [{k: r[k] for k in ("seed", "reward", "termination")} for r in rows if not r["success"]]
            results[policy] = {"episodes": n, "success_rate": sum(r["success"] for r in rows) / n,
                               "mean_reward": sum(r["reward"] for r in rows) / n, "failed_examples": failed[:5]}
        doc["policies"] = results
        finite = [r for r in self.rewards if math.isfinite(r)]
        doc["rewards"] = {"n": len(self.rewards), "n_nonfinite": len(self.rewards) - len(finite),
                          "min": min(finite, default=0.0), "max": max(finite, default=0.0),
                          "distinct": len(set(finite)), "n_verified": len(self.verifier_rewards),
                          "verifier_distinct": len(set(self.verifier_rewards)),
                          "verifier_first": self.verifier_rewards[0] if self.verifier_rewards else None}
        env.close()
        return doc


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _random_value(schema: dict[str, Any], rng: Any, tokens: list[str]) -> Any:
    kind = schema.get("type")
    if kind == "integer":
        return int(rng.integers(0, 10))
    if kind == "number":
        return float(rng.integers(0, 100))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "array":
        return [_random_value(schema.get("items", {"type": "string"}), rng, tokens)]
    if kind == "object":
        return {}
    return tokens[int(rng.integers(len(tokens)))] if tokens else "x"


def _random_call(tools: list[dict[str, Any]], rng: Any, seen: str) -> str:
    """One call of a random tool with plausible arguments (ids copied from what the agent has seen)."""
    from trace_envs.core.parsing import format_tool_call

    fn = tools[int(rng.integers(len(tools)))]["function"]
    props = fn.get("parameters", {}).get("properties", {})
    tokens = sorted(set(_ID_TOKEN.findall(seen)))
    return format_tool_call(fn["name"], {k: _random_value(v, rng, tokens) for k, v in props.items()})


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        cfg = json.load(fh)
    try:  # the nonce that marks the report stays out of the module's reach (defence in depth: see static.py)
        os.unlink(argv[1])
    except OSError:
        pass
    del sys.argv[1:]
    out = os.fdopen(os.dup(1), "w")
    captured = io.StringIO()
    sys.stdout = sys.stderr = captured  # the module's prints go nowhere the host reads
    probe = _Probe(cfg, out)
    try:
        doc = probe.run()
    except BaseException as exc:  # noqa: BLE001 - every failure of the module is a finding
        tb = traceback.format_exc()
        doc = {"error": {"phase": probe.last, "type": type(exc).__name__, "message": str(exc)[:2000],
                         "traceback": tb[-4000:]}}
    doc["module_output"] = captured.getvalue()[-2000:]
    probe.report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
