"""The scripted expert of the τ² family domains, with the four capability knobs.

It follows the task annotation (``info['task']['requests']``, privileged like every scripted expert)
but takes its decisions from what tau2's tools return: it identifies the user (a failed lookup means
the user is not authenticated), looks each record up, refuses when the domain's policy check on the
looked-up record fails, confirms, writes, and tells the user the outcome. Knobs (probabilities):

* ``precondition``: act although the policy check (or the authentication) failed;
* ``structured``: write on the decoy record / answer with the first value instead of the total;
* ``multi_step``: stop after the first request;
* ``precision``: write with the imprecise arguments (``spec['sloppy']``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.scripted import GeneratorScript, Script, last_tool_output

KNOBS = ("precondition", "structured", "multi_step", "precision")
Observation = list[dict[str, Any]]


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


class Tau2Expert(GeneratorScript):
    """``reset(obs, info, seed)`` / ``act(obs)``; all knobs 0 is the oracle."""

    def __init__(self, domain: Any, knobs: dict[str, float] | None = None, seed: int = 0):
        self.domain = domain
        self.knobs = {k: 0.0 for k in KNOBS}
        for name, value in (knobs or {}).items():
            if name not in KNOBS:
                raise ValueError(f"unknown expert knob {name!r}; known: {KNOBS}")
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"knob {name} must be in [0, 1], got {value}")
            self.knobs[name] = float(value)
        self.seed = seed

    def reset(self, observation: Observation, info: dict[str, Any], seed: int | None = None) -> None:
        rng = np.random.default_rng([self.seed, 0 if seed is None else seed])
        self._start(self._script(info["task"], rng))

    def _script(self, task: dict[str, Any], rng: np.random.Generator) -> Script:
        k = self.knobs
        stop_after_first = rng.random() < k["multi_step"]
        name, args = task["identify"]
        obs = yield format_tool_call(name, args)
        output = last_tool_output(obs)
        authenticated = not output.startswith("Error")
        user_id = task["user_id"]
        if authenticated and name != "get_user_details":
            user_id = output.strip()
            obs = yield format_tool_call("get_user_details", {"user_id": user_id})
        outcomes: list[str] = []
        for index, spec in enumerate(task["requests"]):
            if index > 0 and stop_after_first:
                break
            entity = spec["entity_id"]
            record: dict[str, Any] = {}
            if spec.get("lookup"):
                obs = yield format_tool_call(*spec["lookup"])
                record = _json(last_tool_output(obs))
            for read in spec.get("reads", []):
                obs = yield format_tool_call(*read)
            if spec["kind"] == "question":
                values = self.domain.question_values(spec, record)
                if rng.random() < k["structured"] or len(values) < 2:
                    answer = str(values[0]) if values else "0"
                else:
                    obs = yield format_tool_call("calculate", {"expression": " + ".join(map(str, values))})
                    answer = last_tool_output(obs)
                outcomes.append(spec["answer_template"].format(answer=answer))
                continue
            if authenticated:
                refusal = self.domain.refusal(spec, record, user_id)
            else:
                refusal = f"I cannot help with {entity}: I could not verify your identity."
            if refusal and not rng.random() < k["precondition"]:
                outcomes.append(refusal)
                continue
            call = spec["write"]
            if spec.get("wrong") and rng.random() < k["structured"]:
                call = spec["wrong"]
            elif spec.get("sloppy") and rng.random() < k["precision"]:
                call = spec["sloppy"]
            obs = yield f"Please confirm: {spec['confirm']}?"
            obs = yield format_tool_call(call[0], call[1])
            if last_tool_output(obs).startswith("Error"):
                outcomes.append(refusal or f"I could not complete the request for {entity}.")
            else:
                outcomes.append(spec["done"])
        yield " ".join(outcomes)
