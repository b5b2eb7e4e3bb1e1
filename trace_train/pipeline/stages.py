"""The TRACE stages as functions over one run directory (each called through ``StageRunner``).

Every stage reads what earlier stages wrote and writes into its own folder; GRPO stages resume from
their checkpoints, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from trace_envs.hints import envs_without_hints
from trace_envs.records import read_trajectories, write_json_atomic
from trace_train.model.system_notes import capability_note
from trace_train.pipeline.config import MoEConfig, PipelineConfig
from trace_train.pipeline.policy_play import base_spec, play

logger = logging.getLogger(__name__)


def resolve_base_model(cfg: PipelineConfig, bootstrap_cfg: Any, stage_dir: Path, repo_root: Path) -> dict[str, Any]:
    """The base policy: ``base_model`` if given, else the shipped checkpoint (from the installed package) when its
    config hash matches the bootstrap config, else a fresh (cached, resumable) bootstrap into the run directory.

    ``shipped_checkpoint`` names a checkpoint shipped with trace-rl (``retail-sim-tiny``) or is an absolute
    directory; ``null`` always bootstraps. A missing directory is an error, never a silent re-bootstrap.
    ``repo_root`` is unused (kept for callers)."""
    if cfg.base_model:
        name = str(cfg.base_model)
        path = Path(name).expanduser().resolve()
        if path.is_dir() or name.startswith((".", "/", "~")) or name.count("/") != 1:
            if not (path / "config.json").is_file():
                raise FileNotFoundError(f"pipeline.base_model={name}: no HF model directory at {path} (no config.json)"
                                        "; pass a saved model directory, a hub id, or base_model=null to bootstrap")
            return {"model": str(path), "source": "given"}
        return {"model": name, "source": "hub"}  # an explicit hub id such as Qwen/Qwen3-30B-A3B-Instruct-2507
    wanted = bootstrap_cfg.content_hash()
    shipped = matching_shipped(cfg, wanted)
    if shipped is not None:
        logger.info("using the shipped base checkpoint %s (config hash %s)", shipped, wanted)
        return {"model": str(shipped), "source": "shipped", "config_hash": wanted}
    from trace_train.bootstrap.trainer import Bootstrapper

    runner = Bootstrapper(bootstrap_cfg, stage_dir)
    summary = runner.run()
    return {"model": str(runner.model_dir.resolve()), "source": "bootstrapped", "config_hash": wanted,
            "probe": summary.get("probe")}


def matching_shipped(cfg: PipelineConfig, wanted: str) -> Path | None:
    """The checkpoint ``pipeline.shipped_checkpoint`` names when it was made from the bootstrap config hash
    ``wanted``, else None (the base is bootstrapped); a named checkpoint that is not there is an error."""
    from trace_train.bootstrap.compare import made_from
    from trace_train.paths import shipped_checkpoint

    if not cfg.shipped_checkpoint:
        return None
    given = Path(str(cfg.shipped_checkpoint)).expanduser()
    shipped = given if given.is_absolute() else shipped_checkpoint(str(cfg.shipped_checkpoint))
    if not (shipped / "config.json").is_file():
        raise FileNotFoundError(f"pipeline.shipped_checkpoint={cfg.shipped_checkpoint}: no model at {shipped}; "
                                "reinstall trace-rl or set pipeline.shipped_checkpoint=null to bootstrap")
    return shipped if made_from(shipped) == wanted else None


def base_choice_part(cfg: PipelineConfig, bootstrap_cfg: Any) -> tuple[Any, ...]:
    """The part of the bootstrap stage's hash that says which base :func:`resolve_base_model` takes when
    ``pipeline.shipped_checkpoint`` is not the default: the chosen checkpoint (the later stages read it from its
    path) and its ``model_fingerprint``, or that the base is bootstrapped. () when ``base_model`` is given (it is
    hashed itself) and for the default, so that run directories made before keep their hashes."""
    from trace_train.bootstrap.compare import model_fingerprint

    default = PipelineConfig.__dataclass_fields__["shipped_checkpoint"].default
    if cfg.base_model or cfg.shipped_checkpoint == default:
        return ()
    shipped = matching_shipped(cfg, bootstrap_cfg.content_hash())
    if shipped is None:
        return ({"bootstrapped": True},)
    return ({"shipped_checkpoint": str(shipped.resolve()), "fingerprint": model_fingerprint(shipped)},)


def capabilities_to_synthesize(selected: list[str], max_capabilities: int) -> list[str]:
    """The first ``max_capabilities`` of ``selected`` that an env family can build, then every one none can.

    The cap bounds the adapters, so a capability without a family (it needs the LLM env generator) does
    not take a place; it still goes to ``synthesize``, which reports it as such.
    """
    from trace_envs.families import FAMILIES

    buildable = [name for name in selected if name in FAMILIES][:max_capabilities]
    return buildable + [name for name in selected if name not in FAMILIES]


def capability_prompt(selected_path: Path, names: list[str]) -> str:
    """The "prompted" baseline's addition to the system prompt: the selected capabilities' descriptions."""
    doc = json.loads(Path(selected_path).read_text())
    described = {c["name"]: c.get("description", "") for c in doc.get("selected", [])}
    return capability_note([(name, described.get(name, "")) for name in names])


def trainer_config(grpo_cfg: Any, iterations: int, mode: str = "grpo") -> Any:
    """The GRPO config an adapter trains with: the ``grpo`` group as given, with the stage's ``iterations``
    (a trained baseline gets TRACE's whole budget) and ``mode`` (``sft`` for the SFT baseline)."""
    return replace(grpo_cfg, iterations=iterations, mode=mode)


def grpo_run(cfg: PipelineConfig, grpo_cfg: Any, model_dir: str, env: str | dict[str, float], adapter: str,
             out_dir: Path, iterations: int, mode: str = "grpo",
             env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train one adapter (resuming from ``out_dir``'s checkpoint); returns its final and versioned dirs.

    ``grpo_cfg`` is used as given (the ``grpo`` group: counts, sampling, threads); only ``iterations`` (a
    baseline's budget) and ``mode`` come from the caller. The rollout backend renders tools as the pipeline's
    policy does."""
    from trace_train.grpo import GRPOTrainer
    from trace_train.grpo.lora import versioned_dir
    from trace_train.model import load_policy
    from trace_train.rollout.hf import HFRolloutBackend

    p = cfg.policy
    gcfg = trainer_config(grpo_cfg, iterations, mode)
    if gcfg.hint_fraction > 0:
        without = envs_without_hints([env] if isinstance(env, str) else list(env), env_kwargs or {})
        if without:  # an LLM-written env has no hint: its adapter trains unhinted, and its config.json says so
            logger.warning("%s: %s support no hints; training with grpo.hint_fraction=0 instead of %s", adapter,
                           without, gcfg.hint_fraction)
            gcfg = replace(gcfg, hint_fraction=0.0)
    model, tokenizer = load_policy(model_dir)
    trainer = GRPOTrainer(
        model, lambda peft_model: HFRolloutBackend(peft_model, tokenizer, threads=gcfg.threads,
                                                   render_tools=p.render_tools, policy_name=adapter),
        gcfg, env=env, adapter=adapter, output_dir=out_dir, resume=True, env_kwargs=env_kwargs,
        pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
    )
    trainer.train()
    versions = [
        {"iteration": it, "rollouts": it * gcfg.groups_per_iter * gcfg.group_size,
         "dir": str(versioned_dir(out_dir, adapter, it))}
        # the trainer saves every checkpoint_every iterations and at the end
        for it in sorted({*range(gcfg.checkpoint_every, iterations + 1, gcfg.checkpoint_every), iterations})
        if versioned_dir(out_dir, adapter, it).exists()
    ]
    return {"adapter": adapter, "adapter_dir": versions[-1]["dir"], "versions": versions,
            "rollouts": iterations * gcfg.groups_per_iter * gcfg.group_size, "env": env}


def checkpoint_of(run: dict[str, Any], iterations: int) -> dict[str, Any]:
    """A GRPO run's outputs as they stood after ``iterations``: the learning rate is constant and every
    iteration's seeds come from (run seed, iteration) alone, so this is the run trained for ``iterations``
    (``tests/pipeline/test_target_checkpoint.py`` checks the adapters are bit-identical)."""
    versions = [v for v in run["versions"] if v["iteration"] <= iterations]
    if not versions or versions[-1]["iteration"] != iterations:
        raise ValueError(f"no checkpoint at iteration {iterations} in {run['adapter_dir']} (checkpoint_every must "
                         "divide TRACE's iterations for the 1x GRPO-on-target row to come from the 4x run)")
    return {**run, "adapter_dir": versions[-1]["dir"], "versions": versions, "rollouts": versions[-1]["rollouts"],
            "checkpoint_of": run["adapter_dir"]}


def _successful_records(train_outputs: dict[str, dict[str, Any]], max_per_capability: int,
                        before_iteration: int | None = None):
    """``(capability, record)`` of the GRPO runs' successful rollouts with token ids, newest first, at most
    ``max_per_capability`` each (``before_iteration``: only those played before that many iterations)."""
    for capability, out in train_outputs.items():
        files = sorted((Path(out["adapter_dir"]).parents[2] / "rollouts").glob("iter_*.jsonl"), reverse=True)
        if before_iteration is not None:
            files = [f for f in files if int(f.stem.removeprefix("iter_")) < before_iteration]
        taken = 0
        for path in files:
            for record in read_trajectories(path):
                if taken >= max_per_capability:
                    break
                if record.success and record.token_ids and record.loss_mask:
                    yield capability, record
                    taken += 1
        logger.info("%d successful training episodes of %s", taken, capability)


def gate_examples(train_outputs: dict[str, dict[str, Any]], slot_names: list[str], max_per_capability: int,
                  before_iteration: int | None = None):
    """Successful capability-env rollouts (with token ids) from the GRPO runs, labelled with their slot, newest
    first; ``before_iteration``: only those played before that many iterations (a checkpoint's own data).

    A hinted rollout is taken under its unhinted prompt, as the GRPO update takes it: the composed model never
    sees a hint, and each capability's hint text would label its env perfectly."""
    from trace_moe import GateExample
    from trace_train.grpo.hints import training_sequence

    examples = []
    for capability, record in _successful_records(train_outputs, max_per_capability, before_iteration):
        sequence = training_sequence(record)
        mask = [int(m) for m in sequence.loss_mask]
        examples.append(GateExample(sequence.token_ids, mask, slot_names.index(capability), record.episode_id))
    return examples


def gate_data_part(moe: MoEConfig, grpo_cfg: Any) -> tuple[str, ...]:
    """The part of a composition's stage hash that says its gates learn from :func:`gate_examples` taken under
    the unhinted prompt. Compositions made from hinted rollouts before that fix (session 41) kept the hint in
    their gate data; the part changes their hash, so a run directory redoes them (and what evaluated them)."""
    if grpo_cfg.hint_fraction > 0 and moe.gate.scope != "episode" and moe.train.method != "routing_targets":
        return ("gate examples under the unhinted prompt",)
    return ()


def solved_requests(train_outputs: dict[str, dict[str, Any]], max_per_capability: int,
                    before_iteration: int | None = None) -> list[tuple[str, str]]:
    """``(capability, first user message)`` of the same successful rollouts: a retrieval router's corpus."""
    from trace_moe.routers import first_user_message

    return [(capability, first_user_message(record.messages))
            for capability, record in _successful_records(train_outputs, max_per_capability, before_iteration)]


def router_examples(train_outputs: dict[str, dict[str, Any]], slot_names: list[str], max_per_capability: int,
                    before_iteration: int | None = None) -> list[tuple[str, int]]:
    """``(first user message, slot)`` of the same successful rollouts: the episode router's data."""
    return [(text, slot_names.index(capability))
            for capability, text in solved_requests(train_outputs, max_per_capability, before_iteration)]


def compose_adapters(cfg: PipelineConfig, model_dir: str, train_outputs: dict[str, dict[str, Any]],
                     out_dir: Path, moe: MoEConfig | None = None, before_iteration: int | None = None,
                     gate_env: tuple[Any, dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """Gates over the trained adapters, configured by the ``moe`` group (``moe.gate``, ``moe.train``), trained on
    the adapters' successful rollouts (``before_iteration``: only those played before that iteration).

    ``moe.train.method=routing_targets`` trains them instead on the target's successful episodes, labelled with
    each seed's best slot (``trace_train.pipeline.gate_targets``, ``moe.routing``) on ``gate_env``.
    ``moe.train.method=grpo_target|grpo_mixture`` then refines those gates by gate-only GRPO (``moe.grpo``) on
    ``gate_env`` (``(env id or {id: weight}, gym kwargs)``: the target, or the capability envs' mixture). GRPO
    starts from the supervised gates because top-1 gates that route every token to the base get no gradient.
    The rollouts the gates play (either method) are in the outputs (``gate_rollouts``): TRACE's budget counts them."""
    import numpy as np

    from trace_moe import ComposedModel, routing_report, train_gates
    from trace_moe.examples import hold_out_episodes
    from trace_moe.token_labels import label_examples

    moe = moe if moe is not None else MoEConfig()
    if moe.train.method == "routing_targets" and gate_env is None:
        raise ValueError("moe.train.method=routing_targets needs the target env to play")
    if moe.gate.scope == "episode":
        return compose_episode_router(cfg, model_dir, train_outputs, out_dir, moe, before_iteration, gate_env)
    names = list(train_outputs)
    composed = ComposedModel.from_pretrained(model_dir, [train_outputs[n]["adapter_dir"] for n in names],
                                             moe.gate, adapter_names=names)
    outputs: dict[str, Any] = {"composed_dir": str(out_dir / "composed")}
    if moe.train.method == "routing_targets":
        from trace_train.pipeline.gate_targets import routing_target_examples

        examples, outputs["routing_targets"] = routing_target_examples(
            cfg, model_dir, {n: train_outputs[n]["adapter_dir"] for n in names}, moe.routing, *gate_env)
        missing = "no slot solved any of the target seeds the routing targets played"
    else:
        examples = gate_examples(train_outputs, ["base", *names], cfg.compose.max_examples_per_capability,
                                 before_iteration)
        missing = "no successful capability-env rollouts to train the gates on"
    if not examples:
        return {"skipped": missing}
    examples = label_examples(composed, examples, moe.train.labels, moe.train.likelihood_margin,
                              max_len=moe.train.max_len, pad_id=moe.train.pad_id)
    order = np.random.default_rng(0).permutation(len(examples))
    train, held = hold_out_episodes(examples, order, max(1, len(examples) // 10))
    metrics = train_gates(composed, train or held, moe.train)
    if moe.train.method.startswith("grpo_"):
        outputs["gate_grpo"] = refine_gates_grpo(cfg, composed, model_dir, moe, gate_env, out_dir / "gate_grpo")
    outputs["gate_rollouts"] = (outputs.get("routing_targets", {}).get("rollouts", 0)
                                + outputs.get("gate_grpo", {}).get("rollouts", 0))
    report = routing_report(composed, held)
    composed.save(out_dir / "composed")
    write_json_atomic(out_dir / "routing_report.json", report.to_dict())
    write_json_atomic(out_dir / "compose_metrics.json", {"train": metrics.to_dict(), "examples": len(train),
                                                         "held_out": len(held)})
    return {**outputs, "routing_accuracy": report.to_dict().get("token_accuracy"),
            "composition_sha256": composition_fingerprint(out_dir / "composed")}


def composition_fingerprint(composed_dir: Path) -> str:
    """sha256 over a saved composition's files (gates, ``compose.json``, an episode router): in the compose stage's
    outputs, so that the stages that read the composed model see new gates even when every path stays the same."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(composed_dir).iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def composition_part(spec: Any) -> tuple[str, ...]:
    """For the hash of a stage that evaluates ``spec`` (a ``PolicySpec``): a composed policy's
    :func:`composition_fingerprint` (its path stays the same when its gates change); () for any other policy."""
    if spec.kind in ("composed", "task_router") and spec.adapter and Path(spec.adapter).is_dir():
        return (composition_fingerprint(Path(spec.adapter)),)
    return ()


def compose_episode_router(cfg: PipelineConfig, model_dir: str, train_outputs: dict[str, dict[str, Any]],
                           out_dir: Path, moe: MoEConfig, before_iteration: int | None = None,
                           gate_env: tuple[Any, dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """``moe.gate.scope=episode``: the adapters composed under one learned router that reads each episode's first
    user message (``trace_moe.episode_router``). ``moe.train.method=supervised`` fits it on the adapters'
    successful rollouts, each labelled with its capability; ``routing_targets`` on the target's training seeds,
    each request's target from the reward every slot alone earns on it (``moe.routing``, played on ``gate_env``).
    A tenth of the distinct requests is held out for the routing summary."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from trace_moe import ComposedModel
    from trace_moe.episode_router import request_features, summarize_routing, train_episode_router
    from trace_train.model.rendering import ChatRenderer

    names = list(train_outputs)
    composed = ComposedModel.from_pretrained(model_dir, [train_outputs[n]["adapter_dir"] for n in names],
                                             moe.gate, adapter_names=names)
    outputs: dict[str, Any] = {}
    if moe.train.method == "routing_targets":  # gate_env checked by compose_adapters
        from trace_train.pipeline.gate_targets import play_slots, routing_target_requests

        per_slot = play_slots(cfg, model_dir, {n: train_outputs[n]["adapter_dir"] for n in names}, moe.routing,
                              *gate_env)
        requests, targets, outputs["routing_targets"] = routing_target_requests(per_slot, ["base", *names],
                                                                                moe.routing.label)
        examples = list(zip(requests, targets))
        missing = "no slot earned reward on any of the target seeds the routing targets played"
    else:
        slots = router_examples(train_outputs, ["base", *names], moe.episode_router.examples_per_capability,
                                before_iteration)
        examples = [(text, np.eye(len(names) + 1)[slot]) for text, slot in slots]
        missing = "no successful capability-env rollouts to train the router on"
    if not examples:
        return {"skipped": missing}
    encode = ChatRenderer(AutoTokenizer.from_pretrained(model_dir)).request_ids
    # the members of a group share their request: hold out a tenth of the distinct requests, not of the episodes
    texts = sorted({t for t, _ in examples})
    held_texts = {texts[i] for i in np.random.default_rng(0).permutation(len(texts))[:max(1, len(texts) // 10)]}
    held = [e for e in examples if e[0] in held_texts]
    train = [e for e in examples if e[0] not in held_texts] or held
    router = train_episode_router(composed, [encode(t) for t, _ in train],
                                  torch.tensor(np.stack([p for _, p in train])), moe.episode_router)
    summary = summarize_routing(router, request_features(composed, [encode(t) for t, _ in held], router.pool),
                                [int(np.argmax(p)) for _, p in held])
    composed.save(out_dir / "composed")
    router.save(out_dir / "composed")
    write_json_atomic(out_dir / "routing_report.json", {"scope": "episode", **summary.to_dict()})
    write_json_atomic(out_dir / "compose_metrics.json", {"scope": "episode", "examples": len(train),
                                                         "held_out": len(held), **outputs})
    return {**outputs, "composed_dir": str(out_dir / "composed"),
            "gate_rollouts": outputs.get("routing_targets", {}).get("rollouts", 0),
            "routing_accuracy": summary.episode_accuracy,
            "composition_sha256": composition_fingerprint(out_dir / "composed")}


def refine_gates_grpo(cfg: PipelineConfig, composed: Any, model_dir: str, moe: MoEConfig,
                      gate_env: tuple[Any, dict[str, Any] | None] | None, out_dir: Path) -> dict[str, Any]:
    """Gate-only GRPO (``trace_train.grpo.gate_grpo``) on ``gate_env``, resuming from ``out_dir``; returns its
    iterations and rollouts."""
    from transformers import AutoTokenizer

    from trace_train.grpo.gate_grpo import train_gates_grpo

    if gate_env is None:
        raise ValueError(f"moe.train.method={moe.train.method} needs the env to train the gates on")
    env, kwargs = gate_env
    g = moe.grpo
    result = train_gates_grpo(composed, AutoTokenizer.from_pretrained(model_dir), env, g, out_dir,
                              env_kwargs=kwargs or None, resume=True,
                              backend_kwargs={"render_tools": cfg.policy.render_tools, "policy_name": "moe"})
    return {"iterations": result["iterations"], "rollouts": g.iterations * g.groups_per_iter * g.group_size,
            "env": env}


def sample_efficiency(cfg: PipelineConfig, model_dir: str, trace_rollouts: int, trace_summary: dict[str, Any] | None,
                      baseline_outputs: dict[str, dict[str, Any]], out_dir: Path,
                      final_summaries: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Held-out success vs training rollouts: GRPO-on-target checkpoints vs TRACE's final composed point (no
    TRACE curve when there is no composed model: ``trace_summary`` None).

    Each GRPO-on-target checkpoint plays ``eval.curve_episodes`` held-out seeds; with ``curve_episodes: 0`` the
    curve is its final point only, taken from its held-out evaluation (``final_summaries["grpo_target"]``), so no
    episode is played again."""
    from trace_train.evaluation import summarize

    curves: dict[str, list[list[float]]] = {}
    if trace_summary is not None:
        overall = trace_summary["overall"]
        curves["TRACE"] = [[float(trace_rollouts), overall["rate"], overall["low"], overall["high"]]]
    target = baseline_outputs.get("grpo_target")
    e = cfg.eval
    if target and e.curve_episodes == 0:
        final = (final_summaries or {}).get("grpo_target")
        if final and target["versions"]:
            s = final["overall"]
            curves["GRPO on target"] = [[float(target["versions"][-1]["rollouts"]), s["rate"], s["low"], s["high"]]]
    elif target:
        points = []
        for version in target["versions"]:
            spec = replace(base_spec(cfg, model_dir, name=f"grpo_target@{version['iteration']}",
                                     adapter=version["dir"]), greedy=e.greedy)
            records = [record for env_id in cfg.targets
                       for record in play(spec, env_id, e.split, e.curve_episodes, batch=e.batch_episodes,
                                          env_kwargs=cfg.env_kwargs(env_id, e.split))]
            s = summarize(records).overall
            points.append([float(version["rollouts"]), s.rate, *s.interval])
        curves["GRPO on target"] = points
    doc = {"curves": curves}
    write_json_atomic(out_dir / "sample_efficiency.json", doc)
    return doc


def to_jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(asdict(obj) if hasattr(obj, "__dataclass_fields__") else obj, default=str))
