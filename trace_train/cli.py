"""The ``trace-rl`` console script: ``trace-rl <command> [hydra overrides]``.

Every command is its own Hydra app (``trace_train/commands/<command>.py`` with a ``main`` decorated
by ``hydra.main`` and a config ``conf/<command>.yaml``), so ``-m`` multirun sweeps work on each.
"""

from __future__ import annotations

import importlib
import sys

from rich.console import Console
from rich.table import Table

# command -> one-line description; the module is trace_train.commands.<command with - as _>
COMMANDS: dict[str, str] = {
    "rollout": "play a policy on any registered env and write trajectories.jsonl",
    "analyze": "contrastive capability analysis of trajectories -> selected_capabilities.json",
    "synthesize": "emit one calibrated capability env per selected capability (a manifest row)",
    "calibrate": "measure a policy on an env (success, reward spread, group statistics) against the gate",
    "train": "GRPO (or SFT) of one LoRA adapter on a registered env, base frozen",
    "compose": "train token-level MoE gates over frozen capability adapters",
    "eval": "pass rate / pass^k with intervals on held-out seeds, per capability, across policies",
    "pipeline": "run all of TRACE end to end and write the HTML report",
    "report": "rebuild the HTML report of a run directory",
    "bootstrap": "behaviour-clone the embedded default's tiny base model from the scripted expert",
    "expert": "score the scripted oracle / imperfect expert on an env, per capability",
    "bench": "policies x envs on the same held-out seeds, paired vs a baseline (bootstrap, McNemar), HTML page",
}


def _print_help(console: Console) -> None:
    console.print("[bold]trace-rl[/bold] <command> [hydra overrides]   (add -m for a multirun sweep)\n")
    table = Table(show_header=True, header_style="bold")
    table.add_column("command")
    table.add_column("what it does")
    for name, text in COMMANDS.items():
        table.add_row(name, text)
    console.print(table)
    console.print("\n`trace-rl <command> --help` lists that command's config keys with their defaults and comments;"
                  " `--hydra-help` shows Hydra's own help.")


def print_command_help(console: Console, command: str) -> None:
    """Each config key of ``command`` (its ``conf/<command>.yaml`` and default groups): default and comment."""
    from rich.markup import escape

    from trace_train.confdoc import command_keys
    from trace_train.paths import CONF_DIR

    console.print(f"[bold]trace-rl {command}[/bold] [key=value ...]   {COMMANDS[command]}")
    table = Table("key", "default", "what it sets", header_style="bold", show_lines=False)
    for entry in command_keys(CONF_DIR, command.replace("-", "_")):
        table.add_row(escape(entry.key), escape(entry.default), escape(entry.comment))
    console.print(table)
    console.print(escape("Override any key as key=value (a list as key=[a,b]); `-m` sweeps comma-separated values; "
                         "`--hydra-help` shows Hydra's own options (--cfg job, --info, ...)."))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    if not argv or argv[0] in {"-h", "--help", "help"}:
        _print_help(console)
        return
    command = argv[0]
    if command not in COMMANDS:
        console.print(f"[red]unknown command {command!r}[/red]; choose one of: {', '.join(COMMANDS)}")
        raise SystemExit(2)
    rest = argv[1:]
    if any(a in ("-h", "--help") for a in rest):
        print_command_help(console, command)
        return
    rest = ["--help" if a == "--hydra-help" else a for a in rest]
    module = importlib.import_module(f"trace_train.commands.{command.replace('-', '_')}")
    sys.argv = [f"trace-rl {command}", *rest]
    module.main()


if __name__ == "__main__":
    main()
