"""``trace-rl compose adapters=[dir1,dir2] data=<jsonl> [base=<hf dir>] [extend=<composition>]``.

Trains the token-level MoE gates of :class:`trace_moe.ComposedModel` over frozen capability LoRA
adapters (paper §5.2), reports routing on held-out examples, and saves the composition
(``compose.json`` + ``gates.safetensors``) plus ``compose_metrics.json`` to ``out``.

``extend=<saved composition> adapters=[<new adapter>]`` adds one adapter as a new gate slot: the
existing adapters are untouched, the gates start from the saved ones and are retrained
(``extend_train=all``) or only the new slot's rows train (``extend_train=new_slot``); the routing
report is given before (the saved composition) and after, on the same held-out examples.

Every gate example's slot comes from its record: a ``label``, ``info.<capability_key>``, ``env_labels``
or the env id (GRPO rollouts on ``trace/<capability>-v0``); a row whose slot cannot be derived stops
the command before training, naming the file and line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from trace_train.commands._app import command_app
from trace_train.commands._validate import ConfigError, existing_path, fail, fraction

logger = logging.getLogger(__name__)

EXTEND_TRAIN = ("all", "new_slot")
DTYPES = ("float32", "bfloat16", "float16")


def _split(examples: list, frac: float, seed: int) -> tuple[list, list]:
    """Held out by whole episodes (:func:`trace_moe.examples.split_by_episode`)."""
    from trace_moe.examples import split_by_episode

    return split_by_episode(examples, frac, seed)


def _container(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def validate(cfg: DictConfig) -> dict[str, Any]:
    """Check every key before a model loads; the resolved paths and settings, or :class:`ConfigError`."""
    from trace_moe.config import MoEConfig
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_bool, check_groups

    check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}", "its composition")
    for key in ("only_successful", "eval_greedy"):
        check_bool(cfg, key)
    check_groups(cfg, "moe")
    adapters = _container(cfg.adapters)
    if isinstance(adapters, str):
        adapters = [adapters]
    if not isinstance(adapters, list) or not adapters:
        raise ConfigError("adapters must be a non-empty list of peft adapter directories: adapters=[dir1,dir2]")
    adapter_dirs = [existing_path(a, "adapters", "peft adapter directory", "adapter_config.json") for a in adapters]
    names = _container(cfg.adapter_names)
    if names is not None and (not isinstance(names, list) or len(names) != len(adapter_dirs)):
        raise ConfigError(f"adapter_names must list one name per adapter ({len(adapter_dirs)}), got {names!r}")
    extend = None
    if cfg.extend:
        extend = existing_path(cfg.extend, "extend", "composition directory (trace-rl compose output)", "compose.json")
        if len(adapter_dirs) != 1:
            raise ConfigError(f"extend= adds exactly one adapter; got adapters= with {len(adapter_dirs)}")
    if str(cfg.extend_train) not in EXTEND_TRAIN:
        raise ConfigError(f"extend_train={cfg.extend_train!r}: choose one of {', '.join(EXTEND_TRAIN)}")
    if cfg.base:
        base = existing_path(cfg.base, "base", "Hugging Face model directory", "config.json")
    elif extend is not None:
        base = Path(json.loads((extend / "compose.json").read_text())["base_model"])
        if not (base / "config.json").exists():
            raise ConfigError(f"the composition's base {base} is gone; set base=<hf directory>")
    else:
        raise ConfigError("base is required: set base=<Hugging Face model directory the adapters were trained on>")
    data = existing_path(cfg.data, "data", "JSONL file", must_be="file")
    held_out = existing_path(cfg.held_out, "held_out", "JSONL file", must_be="file") if cfg.held_out else None
    frac = fraction(cfg.held_out_frac, "held_out_frac")
    if str(cfg.dtype) not in DTYPES:
        raise ConfigError(f"dtype={cfg.dtype!r}: choose one of {', '.join(DTYPES)}")
    if isinstance(cfg.threads, bool) or not isinstance(cfg.threads, int) or cfg.threads < 1:
        raise ConfigError(f"threads must be an integer >= 1, got {cfg.threads!r}")
    env_labels = _container(cfg.env_labels) or {}
    if not isinstance(env_labels, dict):
        raise ConfigError(f"env_labels must map env id -> slot name, got {env_labels!r}")
    try:
        moe = MoEConfig.from_dict(cfg.moe)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    gate_cfg, train_cfg = moe.gate, moe.train
    if extend is not None:  # the saved composition's gates are extended as they are
        from dataclasses import asdict

        saved = json.loads((extend / "compose.json").read_text()).get("gate_config", {})
        ignored = {k: v for k, v in asdict(gate_cfg).items() if k in saved and saved[k] != v}
        if ignored:
            logger.warning("extend keeps the composition's gate settings (%s); these moe.gate values are not used: "
                           "%s", ", ".join(f"{k}={saved[k]}" for k in ignored),
                           ", ".join(f"{k}={v}" for k, v in ignored.items()))
    if gate_cfg.top_k < 1:
        raise ConfigError(f"moe.gate.top_k must be >= 1, got {gate_cfg.top_k}")
    if gate_cfg.scope != "token":
        raise ConfigError("moe.gate.scope=episode: trace-rl compose trains token-level gates; the episode router is "
                          "fitted by `trace-rl pipeline moe.gate.scope=episode` (or trace_moe.episode_router."
                          "train_episode_router on your own requests)")
    if train_cfg.method != "supervised":
        raise ConfigError(f"moe.train.method={train_cfg.method}: trace-rl compose trains supervised gates on the "
                          "given examples; routing targets and gate-only GRPO run in `trace-rl pipeline` (they play "
                          "the target or the capability envs) or through trace_train.pipeline.gate_targets / "
                          "trace_train.grpo.gate_grpo.train_gates_grpo")
    eval_episodes = _checked_eval(cfg)
    out = Path(to_absolute_path(str(cfg.out)))
    if (out / "compose.json").exists():
        raise ConfigError(f"out={out} already holds a composition; choose another out= (nothing is overwritten)")
    if extend is not None and out.resolve() == extend.resolve():
        raise ConfigError("out= must differ from extend=: the saved composition stays as it is")
    return {"adapter_dirs": adapter_dirs, "names": names, "extend": extend, "base": base, "data": data,
            "held_out": held_out, "frac": frac, "env_labels": {str(k): str(v) for k, v in env_labels.items()},
            "gate": gate_cfg, "train": train_cfg, "out": out, "eval_episodes": eval_episodes}


def _checked_eval(cfg: DictConfig) -> int:
    """``eval_episodes`` (0 = off); when on, the env and the split's seeds are checked too."""
    from trace_train.commands._validate import known_env, positive_int
    from trace_train.commands.rollout import check_seed_range

    episodes = positive_int(cfg, "eval_episodes", 0)
    if episodes:
        known_env(str(cfg.eval_env), "eval_env")
        try:
            check_seed_range(str(cfg.eval_split), episodes)
        except ValueError as exc:  # its message names split= / episodes=: here they are eval_split / eval_episodes
            text = str(exc).replace("set split=", "set eval_split=").replace("episodes=", "eval_episodes=")
            raise ConfigError(f"eval_split={cfg.eval_split}: {text}") from None
    return episodes


def held_out_eval(cfg: DictConfig, v: dict[str, Any], out: Path) -> dict[str, Any]:
    """Pass rate of the saved composition (``before``, with extend=) and of the new one (``after``) on the
    same first ``eval_episodes`` seeds of ``eval_split``; trajectories go to ``<out>/eval/``."""
    from trace_train.evaluation.run import evaluate_policies, print_comparison
    from trace_train.policies import PolicySpec

    dirs = {"before": v["extend"], "after": out} if v["extend"] is not None else {"after": out}
    policies = {name: PolicySpec(kind="composed", name=name, model=str(v["base"]), adapter=str(path),
                                 greedy=bool(cfg.eval_greedy), threads=int(cfg.threads))
                for name, path in dirs.items()}
    env, split, episodes = str(cfg.eval_env), str(cfg.eval_split), v["eval_episodes"]
    results = evaluate_policies(policies, env, split, episodes, 1, {}, out / "eval")
    print_comparison(results, title=f"held-out pass rate, {env}, {split} split, the same {episodes} seeds")
    doc: dict[str, Any] = {"env": env, "split": split, "episodes": episodes, "greedy": bool(cfg.eval_greedy),
                           **{name: results[name] for name in dirs}}
    if "before" in doc:
        doc["delta"] = results["after"]["overall"]["rate"] - results["before"]["overall"]["rate"]
    return doc


def _routing_table(title: str, reports: dict[str, Any]) -> Table:
    table = Table("slot", *(f"{k} load" for k in reports), *(f"{k} acc" for k in reports), title=title)
    slots = next(iter(reports.values())).slot_names
    for i, name in enumerate(slots):
        loads = [f"{r.load[i]:.3f}" if i < len(r.load) else "–" for r in reports.values()]
        accs = [f"{r.slot_accuracy[i]:.3f}" if r.slot_accuracy and i < len(r.slot_accuracy)
                and r.slot_accuracy[i] is not None else "–" for r in reports.values()]
        table.add_row(name, *loads, *accs)
    table.add_row("token acc", *("" for _ in reports), *(f"{r.token_accuracy:.3f}" for r in reports.values()))
    table.add_row("episode acc", *("" for _ in reports), *(f"{r.episode_accuracy:.3f}" for r in reports.values()))
    return table


@command_app("compose")
def main(cfg: DictConfig) -> None:
    from trace_envs.records import write_json_atomic
    from trace_moe import ComposedModel, read_examples, routing_report, train_gates
    from trace_moe.adapters import load_adapters
    from trace_moe.token_labels import label_examples

    try:
        v = validate(cfg)
    except ValueError as exc:  # ConfigError, and the split checks' ValueError (eval_split=foo)
        fail("compose", str(exc))
    torch.set_num_threads(int(cfg.threads))
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, str(cfg.dtype))
    model = AutoModelForCausalLM.from_pretrained(str(v["base"]), dtype=dtype).to(cfg.device)
    try:
        if v["extend"] is not None:
            name = v["names"][0] if v["names"] else None
            composed = ComposedModel.extend(v["extend"], v["adapter_dirs"][0], name, model=model)
        else:
            composed = ComposedModel(model, load_adapters(v["adapter_dirs"], v["names"]), v["gate"])
        slots = composed.slot_names
        examples = read_examples(v["data"], slots, cfg.only_successful, cfg.capability_key, v["env_labels"])
        if v["held_out"] is not None:
            train, held = examples, read_examples(v["held_out"], slots, cfg.only_successful, cfg.capability_key,
                                                  v["env_labels"])
        else:
            train, held = _split(examples, v["frac"], int(cfg.split_seed))
        if not train:
            raise ConfigError(f"data={cfg.data}: no gate examples with token data (successful rows with token_ids)")
    except ValueError as exc:
        fail("compose", str(exc))
    train_cfg = v["train"]
    new_slot = composed.num_slots - 1
    if v["extend"] is not None and cfg.extend_train == "new_slot":
        train_cfg.train_slots = [new_slot]
    console = Console()
    counts = {s: sum(e.label == i for e in train) for i, s in enumerate(slots)}
    console.print(f"training {composed.num_layers} gates over slots {slots} on {len(train)} examples {counts} "
                  f"({composed.check_trainable().trainable:,} trainable parameters)")
    train = label_examples(composed, train, train_cfg.labels, train_cfg.likelihood_margin,
                           pad_id=train_cfg.pad_id, max_len=train_cfg.max_len)
    held = label_examples(composed, held, train_cfg.labels, train_cfg.likelihood_margin,
                          pad_id=train_cfg.pad_id, max_len=train_cfg.max_len)
    reports: dict[str, Any] = {}
    if held and v["extend"] is not None:
        with composed.disabling([new_slot]):
            reports["before"] = routing_report(composed, held, pad_id=train_cfg.pad_id, max_len=train_cfg.max_len)
    metrics = train_gates(composed, train, train_cfg)
    out = v["out"]
    composed.save(out)
    result: dict[str, Any] = {"train": metrics.to_dict(), "num_train": len(train), "num_held_out": len(held),
                              "slots": slots, "train_counts": counts, "split_seed": int(cfg.split_seed)}
    if v["extend"] is not None:
        result["extended_from"] = str(v["extend"])
        result["extend_train"] = str(cfg.extend_train)
    if held:
        reports["after"] = routing_report(composed, held, pad_id=train_cfg.pad_id, max_len=train_cfg.max_len)
        result["routing"] = reports["after"].to_dict()
        if "before" in reports:
            result["routing_before"] = reports["before"].to_dict()
        after = reports["after"]
        console.print(_routing_table(f"held-out routing ({len(held)} examples, split_seed={cfg.split_seed}): token acc "
                                     f"{after.token_accuracy:.3f}, entropy {after.entropy:.3f}", reports))
    if v["eval_episodes"]:
        result["eval"] = held_out_eval(cfg, v, out)
    write_json_atomic(out / "compose_metrics.json", result)
    console.print(f"saved composition to {out}")


if __name__ == "__main__":
    main()
