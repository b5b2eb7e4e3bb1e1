"""`trace-rl <command> --help`: every key with its default and YAML comment; Hydra's help stays reachable."""

from __future__ import annotations

from trace_train import cli
from trace_train.confdoc import command_keys, parse_commented_yaml, split_comment
from trace_train.paths import CONF_DIR

YAML = """\
# file header, not a key's doc
defaults:
  - moe: default   # the group
  - _self_

# the base model
base: ???
url: "http://x/#frag"      # a '#' inside quotes stays
data: null                 # first line
                           # continued here
group:                     # a mapping
  lr: 5.0e-3               # learning rate
  plain: 3
hydra:
  run:
    dir: outputs/x         # never shown
"""


def test_parse_commented_yaml():
    keys, defaults = parse_commented_yaml(YAML)
    got = {k.key: (k.default, k.comment) for k in keys}
    assert got == {
        "base": ("???", "the base model"),
        "url": ('"http://x/#frag"', "a '#' inside quotes stays"),
        "data": ("null", "first line continued here"),
        "group": ("", "a mapping"),
        "group.lr": ("5.0e-3", "learning rate"),
        "group.plain": ("3", ""),
    }
    assert defaults == [("moe", "default")]
    assert split_comment("a#b  # c") == ("a#b", "c")


def test_every_command_documents_its_keys():
    for command in cli.COMMANDS:
        keys = command_keys(CONF_DIR, command.replace("-", "_"))
        assert keys, command
        assert not any(k.key.startswith("hydra") for k in keys), command
    compose = {k.key: k for k in command_keys(CONF_DIR, "compose")}
    assert compose["moe.train.lr"].default == "5.0e-3"
    assert "learning rate" in compose["moe.train.lr"].comment
    assert "new slot" in compose["extend_train"].comment


def test_help_prints_keys_and_hydra_help_is_kept(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    cli.main(["compose", "--help"])
    out = capsys.readouterr().out
    assert "extend_train" in out and "train only the new slot's rows" in out
    assert "[adapters/precondition,adapters/multistep]" in out  # brackets are not eaten as markup
    try:
        cli.main(["compose", "--hydra-help"])
    except SystemExit:
        pass
    assert "powered by Hydra" in capsys.readouterr().out


def test_refused_commands_leave_no_empty_run_dir(tmp_path, capsys, monkeypatch):
    from tests.cli_runner import run_cli

    monkeypatch.chdir(tmp_path)
    for command, bad in (("rollout", "episodes=0"), ("eval", "episodes=-3"), ("report", f"run_dir={tmp_path}/no")):
        code, _, err = run_cli(command, bad, hydra_dir=f"outputs/{command}/now", capsys=capsys)
        assert code == 2, (command, err)
        assert f"trace-rl {command}:" in err
        assert not (tmp_path / "outputs").exists(), command
    (tmp_path / "keep").mkdir()
    code, _, _ = run_cli("rollout", "episodes=0", hydra_dir=".", capsys=capsys)  # never the working dir
    assert code == 2 and (tmp_path / "keep").is_dir()


def test_a_file_where_a_directory_is_asked_for_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    from tests.cli_runner import run_cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a run\n")
    (tmp_path / "a_dir").mkdir()
    for command, bad, message in (("report", "run_dir=a_file", "run_dir=a_file: not a directory"),
                                  ("analyze", "trajectories=a_dir", "trajectories=a_dir: not a file")):
        code, _, err = run_cli(command, bad, hydra_dir=f"outputs/{command}/now", capsys=capsys)
        assert code == 2 and message in err.replace("\n", " ") and "Traceback" not in err, (command, err)
    assert (tmp_path / "a_file").read_text() == "not a run\n"
