"""trace-rl MoE composition: token-level gates over frozen capability LoRA adapters.

Public API::

    from trace_moe import ComposedModel, GateConfig, GateTrainConfig, GateExample, train_gates
    composed = ComposedModel.from_pretrained(base_dir, [adapter_dir, ...], GateConfig(top_k=1))
    train_gates(composed, examples, GateTrainConfig.paper())
    print(routing_report(composed, held_out))
    composed.save(out_dir); ComposedModel.load(out_dir)

``GateConfig(scope="episode")`` with :func:`train_episode_router` routes a whole episode from its first user
message instead (:mod:`trace_moe.episode_router`).
"""

from trace_moe.adapters import (
    LoraAdapter,
    adapted_modules,
    check_compatible,
    hash_adapter_dir,
    load_adapter,
    load_adapters,
)
from trace_moe.composed import ComposedModel, find_decoder_blocks
from trace_moe.episode_router import EpisodeRouter, EpisodeRouterConfig, train_episode_router
from trace_moe.examples import GateExample, example_from_record, read_examples
from trace_moe.gate_training import GateTrainConfig, GateTrainMetrics, load_balancing_loss, train_gates
from trace_moe.gated_lora import (
    BlockGate,
    GateConfig,
    GatedLoRALinear,
    TrainableReport,
    check_only_gates_trainable,
)
from trace_moe.param_count import GateCount, count_qwen3_moe_gates, gate_param_formula
from trace_moe.routers import CapabilityLabel, OracleRouter, RouteDecision, TaskLevelRouter, static_merge
from trace_moe.routing_report import RoutingReport, routing_report
from trace_moe.routing_targets import routing_targets
from trace_moe.token_labels import label_examples

__all__ = [
    "BlockGate",
    "CapabilityLabel",
    "ComposedModel",
    "EpisodeRouter",
    "EpisodeRouterConfig",
    "GateConfig",
    "GateCount",
    "GateExample",
    "GateTrainConfig",
    "GateTrainMetrics",
    "GatedLoRALinear",
    "LoraAdapter",
    "OracleRouter",
    "RouteDecision",
    "RoutingReport",
    "TaskLevelRouter",
    "TrainableReport",
    "adapted_modules",
    "check_compatible",
    "check_only_gates_trainable",
    "count_qwen3_moe_gates",
    "example_from_record",
    "find_decoder_blocks",
    "gate_param_formula",
    "hash_adapter_dir",
    "label_examples",
    "load_adapter",
    "load_adapters",
    "load_balancing_loss",
    "read_examples",
    "routing_report",
    "routing_targets",
    "static_merge",
    "train_episode_router",
    "train_gates",
]
