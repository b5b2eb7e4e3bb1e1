"""Behaviour cloning loop: loss on assistant tokens only, checkpoints, exact resume, cache by config hash.

Layout of a bootstrap directory (``<cache>/<config hash>/``)::

    tokenizer/            the domain tokenizer (trained once)
    checkpoint.pt         model + optimizer + RNG + step + loss EMA (atomic; the resume point)
    metrics.jsonl         one line per logged step
    model/                the final policy in Hugging Face format (model + tokenizer)
    bootstrap.json        config, its hash, final probe metrics, wall time, the model's fingerprint
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import AutoTokenizer

from trace_envs.atomic_io import publish_dir, set_plain_write_modes
from trace_envs.records import append_jsonl, drop_rows_from, write_json_atomic
from trace_train.bootstrap.attention_heads import layer_inputs
from trace_train.bootstrap.compare import model_fingerprint
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import Example, batches, pad_batch, train_tokenizer
from trace_train.bootstrap.decisions import DecisionHead, decision_index
from trace_train.bootstrap.linear_probe import linear_probes as fresh_linear_probes
from trace_train.bootstrap.number_copy import number_copy_loss
from trace_train.bootstrap.ownership_circuit import LOOKUP_LAYER, MATCH_LAYER, OwnershipReadouts, ownership_circuit_loss
from trace_train.bootstrap.probe import teacher_forced_probe
from trace_train.grpo.packing import packed_hidden_states
from trace_train.model import ChatRenderer, build_model, load_policy, save_policy
from trace_train.model.chat_template import chat_template

logger = logging.getLogger(__name__)


def lr_at(cfg: BootstrapConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def masked_lm_loss(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                   copies: torch.Tensor | None = None, copy_weight: float = 0.0,
                   hidden: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of next-token prediction on positions whose *target* has loss mask 1.

    With ``copy_weight`` > 0, plus that weight times the mean cross-entropy on the targets marked by
    ``copies`` (entity ids repeated outside assistant turns; see ``BootstrapConfig.copy_loss_weight``).
    The LM head runs only on the selected positions (assistant tokens are ~20 % of an episode).
    ``hidden``: the model's final hidden states when the caller already has them.
    """
    if hidden is None:
        hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
    hidden = hidden[:, :-1]
    targets = ids[:, 1:]
    select = mask[:, 1:].bool()
    loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[select]).float(), targets[select])
    if copy_weight and copies is not None:
        copy_select = copies[:, 1:].bool()
        if copy_select.any():
            copy_logits = model.lm_head(hidden[copy_select]).float()
            loss = loss + copy_weight * torch.nn.functional.cross_entropy(copy_logits, targets[copy_select])
    return loss


@dataclass
class BatchLoss:
    """One batch's BC loss and the parts the metrics log reports (None / empty when the stage has no such term)."""

    total: torch.Tensor
    decision: torch.Tensor | None = None
    circuit: dict[str, float] = field(default_factory=dict)


def batch_loss(model: torch.nn.Module, head: DecisionHead | None, examples: list[Example], cfg: BootstrapConfig,
               pad_id: int, readouts: OwnershipReadouts | None = None) -> BatchLoss:
    """The BC loss of one batch (LM + copy + weighted decision, number-copy and ownership-circuit losses), with the
    batch run padded or packed as ``cfg.packing`` says. ``readouts``: the circuit's heads, when
    ``cfg.ownership_circuit`` is set."""
    ids, attn, mask, copies = (torch.from_numpy(a) for a in pad_batch(examples, pad_id))
    if not mask[:, 1:].any():  # the LM loss would be the mean of nothing: NaN, and no gradient
        raise ValueError(f"bootstrap.max_len={cfg.max_len} cuts every episode of a batch before its first assistant "
                         f"token ({len(examples)} episodes of {max(len(e.ids) for e in examples)} tokens at most): "
                         "raise bootstrap.max_len")
    circuit = cfg.ownership_circuit
    if circuit is not None and readouts is None:
        raise ValueError("bootstrap.ownership_circuit is set: batch_loss needs its readouts")
    layers = ([-1] if cfg.number_copy_weight else []) + ([MATCH_LAYER, LOOKUP_LAYER] if circuit else [])
    packed = cfg.packing == "packed"
    lengths = [len(e.ids) for e in examples]
    with layer_inputs(model.model, layers) as captured:
        if packed:
            hidden = packed_hidden_states(model.model, [e.ids for e in examples])
        else:
            hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
    loss = masked_lm_loss(model, ids, attn, mask, copies, cfg.copy_loss_weight, hidden=hidden)
    if cfg.number_copy_weight:
        rows = _episode_rows(captured[-1][0], lengths, packed)
        numbers = number_copy_loss(model, rows, [e.numbers for e in examples])
        if numbers is not None:
            loss = loss + cfg.number_copy_weight * numbers
    out = BatchLoss(loss)
    if head is not None:
        out.decision = head.loss(hidden, *decision_index([e.decisions or [] for e in examples], head.decisions))
        out.total = out.total + cfg.decision_loss_weight * out.decision
    if circuit is not None:
        layer0, layer1 = (_episode_rows(captured[layer][0], lengths, packed) for layer in (MATCH_LAYER, LOOKUP_LAYER))
        final = _episode_rows(hidden, lengths, False)  # packed_hidden_states hands the final states back padded
        terms = ownership_circuit_loss(model, readouts, circuit, layer0, layer1, final, [e.ownership for e in examples])
        if terms is not None:
            out.total = out.total + terms.total
            out.circuit = terms.parts
    return out


def _episode_rows(states: torch.Tensor, lengths: list[int], packed: bool) -> list[torch.Tensor]:
    """Each episode's ``(L, H)`` states from a packed ``(1, sum L, H)`` row or a padded ``(B, W, H)`` batch."""
    if packed:
        return list(torch.split(states[0], lengths))
    return [states[row, :n] for row, n in enumerate(lengths)]


class BootstrapPaused(RuntimeError):
    """A bootstrap stopped at its time budget; its checkpoint is saved and running it again continues."""

    def __init__(self, config_hash: str, step: int, last_step: int, budget_min: float | None, directory: Path):
        self.config_hash, self.step, self.last_step = config_hash, step, last_step
        budget = "the time budget" if budget_min is None else f"its {budget_min:g}-minute budget"  # None: a deadline
        super().__init__(f"bootstrap {config_hash} paused at step {step} of {last_step} after {budget} (checkpoint "
                         f"in {directory}); run the same command again to continue")


def _save_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
                     elapsed: float, head: DecisionHead | None = None, loss_ema: float | None = None,
                     readouts: OwnershipReadouts | None = None) -> None:
    tmp = path.with_suffix(".tmp")
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
             "elapsed": elapsed, "torch_rng": torch.get_rng_state(), "loss_ema": loss_ema}
    if head is not None:
        state["decision_head"] = head.state_dict()
    if readouts is not None:
        state["ownership_readouts"] = readouts.state_dict()
    torch.save(state, tmp)
    os.replace(tmp, path)


_CHECKPOINT_KEYS = ("model", "optimizer", "step", "elapsed", "torch_rng")


def _damaged(path: Path, exc: BaseException | str, fix: str) -> ValueError:
    """The one-line error for a cache file that cannot be read (truncated, empty, not what it should hold)."""
    detail = " ".join(str(exc).split())[:200] or type(exc).__name__
    return ValueError(f"bootstrap cache file {path} is damaged ({detail}); {fix}")


def _load_tokenizer(directory: Path, stage_dir: Path):
    """``AutoTokenizer.from_pretrained(directory)``; a damaged tokenizer raises ``ValueError`` naming the file."""
    try:
        return AutoTokenizer.from_pretrained(directory)
    except Exception as exc:  # json, transformers and the tokenizers library's bare Exception alike
        raise _damaged(directory / "tokenizer.json", exc, f"delete the stage's cache directory {stage_dir} to "
                       "retrain it") from exc


class Bootstrapper:
    """Runs (or resumes, or reuses) one bootstrap for one config."""

    def __init__(self, cfg: BootstrapConfig, cache_dir: str | Path):
        self.cfg = cfg
        self.config_hash = cfg.content_hash()
        self.dir = Path(cache_dir) / self.config_hash

    @property
    def model_dir(self) -> Path:
        return self.dir / "model"

    def is_done(self) -> bool:
        return (self.dir / "bootstrap.json").exists() and (self.model_dir / "config.json").exists()

    def _tokenizer(self):
        tok_dir = self.dir / "tokenizer"
        if (tok_dir / "tokenizer.json").exists():
            return _load_tokenizer(tok_dir, self.dir)
        tokenizer = train_tokenizer(self.cfg)
        tmp = self.dir / "tokenizer.tmp"
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, tok_dir)
        return tokenizer

    def run(self, progress: bool = True, linear_probes: bool = False, deadline: float | None = None) -> dict[str, Any]:
        """Train to ``cfg.last_step`` (resuming if a checkpoint exists); returns the summary.

        ``linear_probes``: the summary also holds fresh linear probes of every decision on the finished model
        (:func:`trace_train.bootstrap.linear_probe.linear_probes` on 15x / 2x ``probe_episodes`` train / test
        episodes; added to a cached summary that lacks them).
        Raises :class:`BootstrapPaused` when ``cfg.time_budget_min`` runs out first (the checkpoint is saved).
        ``deadline`` (``time.perf_counter()`` seconds): the budget's end, taken when the outermost stage of a chain
        was invoked and handed down to its ``init_from`` stages; None: ``cfg.time_budget_min`` from now."""
        if deadline is None:
            budget_s = math.inf if self.cfg.time_budget_min is None else self.cfg.time_budget_min * 60
            deadline = time.perf_counter() + budget_s
        if self.is_done():
            logger.info("bootstrap %s is cached at %s", self.config_hash, self.dir)
            summary = self._cached_summary()
            self._check_model(summary)
        else:
            summary = self._train(progress, deadline)
        return self._with_linear_probes(summary) if linear_probes else summary

    def _check_model(self, summary: dict[str, Any]) -> None:
        """A finished stage's ``model/`` still holds the model its ``bootstrap.json`` records: its fingerprint is
        recomputed (milliseconds for the tiny presets); a damaged or changed file raises ``ValueError`` naming it."""
        path = self.model_dir / "model.safetensors"
        fix = (f"delete {self.dir / 'bootstrap.json'} to rebuild the model from the stage's checkpoint, or the stage's "
               f"cache directory {self.dir} to retrain it")
        try:
            actual = model_fingerprint(self.model_dir)
        except json.JSONDecodeError as exc:
            raise _damaged(self.model_dir / "tokenizer.json", exc, fix) from exc
        except Exception as exc:  # missing, truncated or garbage: FileNotFoundError, SafetensorError, ...
            raise _damaged(path, exc, fix) from exc
        recorded = summary.get("model_fingerprint")  # None in a summary written before fingerprints were recorded
        if recorded is not None and actual != recorded:
            raise _damaged(path, f"the model's fingerprint {actual[:16]} is not the {str(recorded)[:16]} its "
                           "bootstrap.json records: model.safetensors or tokenizer.json changed", fix)

    def _cached_summary(self) -> dict[str, Any]:
        """The finished stage's ``bootstrap.json``; a damaged one raises ``ValueError`` naming it."""
        path = self.dir / "bootstrap.json"
        fix = (f"delete it to rebuild it from the stage's checkpoint, or delete the stage's cache directory {self.dir} "
               "to retrain it")
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _damaged(path, exc, fix) from exc
        if not isinstance(summary, dict):
            raise _damaged(path, "not a JSON object", fix)
        return summary

    def _with_linear_probes(self, summary: dict[str, Any]) -> dict[str, Any]:
        if "linear_probes" in summary:
            return summary
        model, tokenizer = load_policy(self.model_dir)
        probes = fresh_linear_probes(model, tokenizer, self.cfg, train_episodes=15 * self.cfg.probe_episodes,
                                     test_episodes=2 * self.cfg.probe_episodes)  # 1500 / 200 for the shipped base
        summary = {**summary, "linear_probes": probes}
        write_json_atomic(self.dir / "bootstrap.json", summary)
        return summary

    def _checkpoint(self, path: Path) -> dict[str, Any]:
        """The state saved at ``path``; a checkpoint that cannot be read raises ``ValueError`` naming it."""
        fix = f"delete the stage's cache directory {self.dir} to retrain it"
        try:
            state = torch.load(path, weights_only=False)
        except Exception as exc:  # truncated zip, empty file, garbage: RuntimeError, EOFError, UnpicklingError, ...
            raise _damaged(path, exc, fix) from exc
        missing = [k for k in _CHECKPOINT_KEYS if k not in state] if isinstance(state, dict) else ["all"]
        if not missing:
            wanted = {"decision_head": self.cfg.decision_loss_weight > 0,
                      "ownership_readouts": self.cfg.ownership_circuit is not None}
            missing = [key for key, needed in wanted.items() if needed and key not in state]
        if missing:
            raise _damaged(path, f"missing {missing}", fix)
        return state

    def _train(self, progress: bool, deadline: float) -> dict[str, Any]:
        cfg = self.cfg
        self.dir.mkdir(parents=True, exist_ok=True)
        parent = None
        if cfg.parent is not None:
            parent = Bootstrapper(cfg.parent, self.dir.parent)
            parent.run(progress=progress, deadline=deadline)  # one budget for the whole chain
        torch.set_num_threads(cfg.threads)  # after the parent's run, which sets its own
        if parent is not None:
            tokenizer = _load_tokenizer(parent.model_dir, parent.dir)
            tokenizer.chat_template = chat_template("full" if cfg.render_tools else "none")
        else:
            tokenizer = self._tokenizer()
        renderer = ChatRenderer(tokenizer)
        model = build_model(cfg.preset, tokenizer, seed=cfg.seed, max_position_embeddings=max(cfg.max_len, 2048))
        if parent is not None:
            from transformers import AutoModelForCausalLM

            model.load_state_dict(AutoModelForCausalLM.from_pretrained(parent.model_dir).state_dict())
            logger.info("continuing from bootstrap %s", parent.config_hash)
        model.train()
        head = None
        if cfg.decision_loss_weight > 0:
            generator = torch.Generator().manual_seed(cfg.seed)
            head = DecisionHead(model.config.hidden_size, cfg.decisions)
            torch.nn.init.normal_(head.linear.weight, std=0.02, generator=generator)
            torch.nn.init.zeros_(head.linear.bias)
        readouts = None
        if cfg.ownership_circuit is not None:
            readouts = OwnershipReadouts(model.config.hidden_size, torch.Generator().manual_seed(cfg.seed + 1))
        params = [*model.parameters(), *(head.parameters() if head is not None else ()),
                  *(readouts.parameters() if readouts is not None else ())]
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
        ckpt_path = self.dir / "checkpoint.pt"
        start_step, elapsed, ema = 0, 0.0, None
        if ckpt_path.exists():
            state = self._checkpoint(ckpt_path)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if head is not None:
                head.load_state_dict(state["decision_head"])
            if readouts is not None:
                readouts.load_state_dict(state["ownership_readouts"])
            torch.set_rng_state(state["torch_rng"])
            start_step, elapsed = state["step"], state["elapsed"]
            ema = state.get("loss_ema")  # None in a checkpoint written before the EMA was saved
            drop_rows_from(self.dir / "metrics.jsonl", "step", start_step + 1)  # rows of steps to be replayed
            logger.info("resuming bootstrap %s at step %d", self.config_hash, start_step)
        started = time.perf_counter() - elapsed  # the budget is per invocation (``deadline``): a continued run gets
        # it afresh, and the stages of a chain share it
        columns = [TextColumn("bootstrap"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn()]
        with Progress(*columns, disable=not progress) as bar:
            task = bar.add_task("bc", total=cfg.last_step, completed=start_step, loss="-")
            for step, examples, focused in batches(cfg, renderer, start_step):
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(cfg, step)
                terms = batch_loss(model, head, examples, cfg, tokenizer.pad_token_id, readouts)
                loss = terms.total
                for focus, focus_batch in zip(cfg.focuses, focused):  # each focus batch's loss (same terms), weighted
                    loss = loss + focus.weight * batch_loss(model, head, focus_batch, cfg, tokenizer.pad_token_id,
                                                            readouts).total
                if not torch.isfinite(loss):  # checked before the update: the last checkpoint stays a good one
                    raise ValueError(f"bootstrap {self.config_hash}: the loss at step {step + 1} is {loss.item()} (an "
                                     f"episode cut by bootstrap.max_len={cfg.max_len} before its first assistant "
                                     f"token, or a diverging run: lower bootstrap.lr={cfg.lr:g})")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                optimizer.step()
                ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
                bar.update(task, completed=step + 1, loss=f"{ema:.3f}")
                now = time.perf_counter() - started
                if (step + 1) % 10 == 0 or step + 1 == cfg.last_step:
                    row = {"step": step + 1, "loss": loss.item(), "loss_ema": ema, "lr": lr_at(cfg, step),
                           "grad_norm": float(grad_norm), "elapsed_s": now}
                    if terms.decision is not None:
                        row["decision_loss"] = terms.decision.item()
                    row.update({f"circuit_{name}": value for name, value in terms.circuit.items()})
                    append_jsonl(self.dir / "metrics.jsonl", row)
                if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.last_step:
                    _save_checkpoint(ckpt_path, model, optimizer, step + 1, now, head, loss_ema=ema, readouts=readouts)
                if time.perf_counter() > deadline and step + 1 < cfg.last_step:
                    _save_checkpoint(ckpt_path, model, optimizer, step + 1, now, head, loss_ema=ema, readouts=readouts)
                    raise BootstrapPaused(self.config_hash, step + 1, cfg.last_step, cfg.time_budget_min, self.dir)
        model.eval()
        probe = teacher_forced_probe(model, tokenizer, renderer, cfg, decision_head=head)
        # replaces a model/ left by a run killed before bootstrap.json (the resume retrains that stage)
        # with the modes a plain write gives (safetensors creates its file 0o600): others can read the base
        publish_dir(self.model_dir, lambda tmp: (save_policy(model, tokenizer, tmp), set_plain_write_modes(tmp)))
        summary = {"config": json.loads(json.dumps(asdict(cfg))), "config_hash": self.config_hash,
                   "wall_s": time.perf_counter() - started,
                   "final_loss_ema": ema, "probe": probe,
                   "parameters": sum(p.numel() for p in model.parameters()),
                   "model_fingerprint": model_fingerprint(self.model_dir)}
        write_json_atomic(self.dir / "bootstrap.json", summary)
        return summary


