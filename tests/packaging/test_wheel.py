"""The wheel, installed outside the checkout, carries its configs, prompts, shipped base and τ² files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from trace_train.paths import REPO_ROOT


def _source_tree(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked or new, not ignored) copied to ``dest``: setuptools reuses
    ``build/`` in the tree it builds, so a build in the checkout itself ships files deleted since the last one.
    Outside a git checkout the tree itself."""
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, timeout=60)
    if listed.returncode != 0:
        return REPO_ROOT
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """Build the wheel, install it (no deps) into a fresh venv whose dependencies come from this venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(_source_tree(tmp / "src")), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp / "dist")], check=True, timeout=300,
                   capture_output=True)
    (wheel,) = (tmp / "dist").glob("trace_rl-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the dependencies (torch, transformers, hydra, ...) from this venv, appended after the venv's own packages;
    # a path line does not run that directory's .pth files, so the checkout's editable finder stays out
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, timeout=300, capture_output=True)
    empty = tmp / "empty"
    empty.mkdir()
    return {"wheel": wheel, "venv": venv, "python": python, "site": site, "cwd": empty}


def test_wheel_contents(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    # every module it ships is one of the checkout's (none left over from an earlier build)
    packages = ("trace_envs/", "trace_train/", "trace_moe/", "generated_envs/")
    stale = [n for n in names if n.startswith(packages) and n.endswith(".py") and not (REPO_ROOT / n).is_file()]
    assert not stale, stale
    for required in ("trace_rl_assets/conf/pipeline.yaml", "trace_rl_assets/conf/preset/smoke.yaml",
                     "trace_rl_assets/conf/model/tiny.yaml", "trace_rl_assets/prompts/capability_labeling.md",
                     "trace_rl_assets/checkpoints/retail-sim-tiny/model.safetensors",
                     "trace_rl_assets/checkpoints/retail-sim-tiny/bootstrap.json",
                     "trace_envs/tau2/data/tau2_gold_db_hashes.json",
                     "trace_envs/tau2/data/tau2-head-tasks/LICENSE",
                     "trace_envs/tau2/data/tau2-head-tasks/retail/tasks.json",
                     "trace_envs/tau2/data/tau2-head-tasks/airline/split_tasks.json",
                     "generated_envs/__init__.py"):
        assert required in names, required
    assert "MIT License" in zipfile.ZipFile(installed["wheel"]).read(
        "trace_envs/tau2/data/tau2-head-tasks/LICENSE").decode()
    assert not [n for n in names if n.startswith(("tests/", "runs/", "conf/", "checkpoints/"))]


def test_installed_cli_help_and_assets_from_the_package(installed):
    cwd, venv = installed["cwd"], installed["venv"]
    out = subprocess.run([str(venv / "bin" / "trace-rl"), "--help"], cwd=cwd, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pipeline" in out.stdout and "synthesize" in out.stdout
    probe = ("import json, trace_train, trace_train.paths as p\n"
             "from trace_envs.tau2.tasks import head_tasks_dir, gold_db_hashes_path\n"
             "print(json.dumps({'code': trace_train.__file__, 'conf': str(p.CONF_DIR),"
             " 'prompts': str(p.PROMPTS_DIR), 'base': str(p.shipped_checkpoint()), 'tau2': str(head_tasks_dir()),"
             " 'hashes': str(gold_db_hashes_path()), 'generated': str(p.generated_envs_dir())}))\n")
    out = subprocess.run([str(installed["python"]), "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    where = json.loads(out.stdout)
    generated = Path(where.pop("generated"))
    for key, value in where.items():
        assert Path(value).is_relative_to(installed["site"]), (key, value)
        assert Path(value).exists(), (key, value)
    assert not generated.is_relative_to(installed["site"])  # emitted envs never go into site-packages
    # Hydra finds the packaged configs from an empty directory; ${shipped:...} resolves inside the package
    out = subprocess.run([str(venv / "bin" / "trace-rl"), "eval", "--cfg", "job", "--resolve"], cwd=cwd,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert str(installed["site"] / "trace_rl_assets" / "checkpoints" / "retail-sim-tiny") in out.stdout
    out = subprocess.run([str(venv / "bin" / "trace-rl"), "pipeline", "preset=smoke", "--cfg", "job"], cwd=cwd,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "run_dir: runs/smoke" in out.stdout and "shipped_checkpoint: retail-sim-tiny" in out.stdout
