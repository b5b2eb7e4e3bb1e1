"""An emitted LLM-written env runs in a confined worker subprocess, never in the host: ``gym.make`` gives a proxy
that plays exactly as the in-process env, the host never imports the module, and a worker that hangs, dies or
sends garbage is killed with a clear error that ends only that call (the next reset starts a fresh worker)."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from tests.synthesis.llm.llm_env_modules import CONSTANT_REWARD, GOOD, ORACLE_FAILS, RENAMES_TOOL
from trace_envs.episode import play_scripted
from trace_envs.swe import confinement as conf
from trace_envs.synthesis.llm import authoring
from trace_envs.synthesis.llm.confined_env import ConfinedEnv, WorkerError
from trace_envs.synthesis.llm.loader import ENTRY_POINT, sha256_text
from trace_envs.synthesis.llm.worker_client import Worker

REPO = Path(__file__).resolve().parents[3]
VALID = {"good": GOOD, "oracle_fails": ORACLE_FAILS, "renames_tool": RENAMES_TOOL, "constant_reward": CONSTANT_REWARD}


def _module(tmp_path: Path, source: str, name: str = "cap_llm_source.py") -> tuple[str, str]:
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return str(path), sha256_text(source)


def _register(tmp_path: Path, source: str, env_id: str) -> str:
    path, sha = _module(tmp_path, source)
    gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"source": path, "sha256": sha, "domain": "retail-sim"})
    return path


def _json(x) -> str:
    return json.dumps(x, sort_keys=True)


def _gone(pids: set[int]) -> bool:
    """No process of ``pids`` is left, not even as a zombie."""
    return not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def _oracle_reward(env) -> float:
    """Play ``env``'s oracle turns from its current reset to the end; the last step's reward."""
    for turn in env.oracle_turns():
        _, reward, terminated, truncated, _ = env.step(turn)
        if terminated or truncated:
            break
    return reward


def _worker_interpreters(pids: set[int] | None = None) -> set[int]:
    """The pids of every worker interpreter this process runs, or among ``pids`` (launchers and PID 1 left out)."""
    found = set()
    for pid in conf.descendants(os.getpid()) - {os.getpid()} if pids is None else pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"trace_envs.synthesis.llm.worker" in argv and not any(a.endswith(b"jail.py") for a in argv):
            found.add(pid)
    return found


def _worker_python(env: ConfinedEnv) -> int:
    """The pid of the worker's interpreter (not its launcher or the launcher's PID 1)."""
    for pid in _worker_interpreters(env.worker_pids):
        return pid
    raise AssertionError(f"no worker interpreter among {env.worker_pids}")


def _episode(env, seed: int, actions, options=None) -> list[str]:
    """Everything one episode shows the caller, as JSON text: reset, each step, the oracle's turns, the transcript."""
    obs, info = env.reset(seed=seed, options=options)
    shown = [_json([obs, info]), _json(env.unwrapped.oracle_turns())]
    for action in actions if actions != "oracle" else env.unwrapped.oracle_turns():
        obs, reward, terminated, truncated, info = env.step(action)
        shown.append(_json([obs, reward, terminated, truncated, info]))
        if terminated or truncated:
            break
    shown.append(_json(env.unwrapped.transcript))
    return shown


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_proxy_plays_exactly_as_the_in_process_env(tmp_path, name):
    env_id = f"trace/confined_equivalence_{name}-v0"
    _register(tmp_path, VALID[name], env_id)
    try:
        proxy, plain = gym.make(env_id), gym.make(env_id, confined=False)
        assert isinstance(proxy.unwrapped, ConfinedEnv) and proxy.unwrapped.worker_pids
        assert not isinstance(plain.unwrapped, ConfinedEnv)
        assert proxy.unwrapped.max_steps == plain.unwrapped.max_steps
        assert proxy.observation_space == plain.observation_space and proxy.action_space == plain.action_space
        scripts = ["oracle", ["###STOP###"],
                   ["Hello, can you help?", '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
                    '<tool_call>{"name": "find_user_id_by_email", "arguments": {"email": "x@y.z"}}</tool_call>',
                    "I'm sorry.", "###STOP###"],
                   ['<tool_call>{"name": "get_order_details", "arguments": {}}</tool_call>'] * 8]  # truncated
        for seed in range(3):
            for actions in scripts:
                shown = _episode(proxy, seed, actions)
                assert shown == _episode(plain, seed, actions), (seed, actions)
        assert '"termination": "too_many_errors"' in shown[-2]  # the last script ends truncated
        hinted = {"hint": True}  # an LLM-written env has no hint: both show the plain prompt, no unhinted one
        assert _episode(proxy, 5, "oracle", hinted) == _episode(plain, 5, "oracle", hinted)
        proxy.close()
        plain.close()
    finally:
        gym.registry.pop(env_id, None)


def test_the_proxy_passes_the_gymnasium_env_checker(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha, {"domain": "retail-sim"})
    try:
        check_env(env, skip_render_check=True)
        assert env.worker_pids  # it played in the worker, which is still up
    finally:
        env.close()


def test_the_host_never_imports_the_module(tmp_path):
    """The module's top level writes into a class of the host (a route the static check allows): in the worker
    only. With ``confined=False`` (the debugging opt-out) the same write lands in the host."""
    marker = f"confined_marker_{os.getpid()}"
    source = GOOD.replace("\nclass Env(", f"\nTaskSpec.{marker} = 'the module ran here'\n\n\nclass Env(", 1)
    source = source.replace("transfer_when_stuck", "marker_cap")
    env_id = "trace/confined_marker-v0"
    _register(tmp_path, source, env_id)
    name = f"trace_llm_envs.m{sha256_text(source)[:16]}"
    try:
        env = gym.make(env_id)
        _episode(env, 0, "oracle")
        env.close()
        assert name not in sys.modules and not any(m.startswith(name) for m in sys.modules)
        assert not hasattr(authoring.TaskSpec, marker)
        assert not any(p.name != "cap_llm_source.py" for p in tmp_path.iterdir())  # nothing written beside it
        plain = gym.make(env_id, confined=False)  # the opt-out imports it here: the check above would see that
        assert name in sys.modules and getattr(authoring.TaskSpec, marker) == "the module ran here"
        plain.close()
    finally:
        gym.registry.pop(env_id, None)
        sys.modules.pop(name, None)
        if hasattr(authoring.TaskSpec, marker):
            delattr(authoring.TaskSpec, marker)


SORRY_LOOP = GOOD.replace("    def verify(self, task, outcome):\n",
                          "    def verify(self, task, outcome):\n        while outcome.said('sorry'):\n"
                          "            pass\n").replace("transfer_when_stuck", "loops_on_sorry")


class _Turns:
    """A scripted policy that plays ``turns()`` (called at reset)."""

    name = "turns"

    def __init__(self, turns):
        self.turns = turns

    def reset(self, observation, info, seed=None):
        self.it = iter(self.turns())

    def act(self, observation):
        return next(self.it)


def test_a_worker_that_hangs_in_verify_is_killed_and_the_next_reset_works(tmp_path):
    path, sha = _module(tmp_path, SORRY_LOOP)
    env = ConfinedEnv(path, sha, call_timeout_s=1.5)  # below the worker's own 10 s limit: the host kills it
    try:
        env.reset(seed=0)
        env.step("I'm sorry, I cannot help with that.")
        hung = env.worker_pids
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"cap_llm_source\.py: the confined worker .* did not answer step "
                                               r"within 1\.5 s; it was stopped \(the next reset "
                                               r"starts a fresh one\)"):
            env.step("###STOP###")
        assert time.monotonic() - start < 1.5 + 5
        assert _gone(hung) and not env.worker_pids
        with pytest.raises(RuntimeError, match="call reset"):
            env.step("###STOP###")
        # the callers' episode loop ends only that episode; the next one plays on a fresh worker
        sorry = play_scripted(env, _Turns(lambda: ["I'm sorry.", "###STOP###"]), 1, catch_env_errors=True)
        assert sorry.failure is not None and sorry.failure.stage == "step"
        assert isinstance(sorry.failure.error, TimeoutError)
        solved = play_scripted(env, _Turns(env.oracle_turns), 2, catch_env_errors=True)
        assert solved.failure is None and solved.reward == 1.0
    finally:
        env.close()


def test_a_worker_killed_from_outside_is_a_clear_error_and_the_next_reset_works(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha)
    try:
        env.reset(seed=0)
        old = env.worker_pids
        os.kill(_worker_python(env), signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"cap_llm_source\.py: the confined worker .* exited "
                                              r"(during step|before the step request) \(exit status 137\)"):
            env.step("###STOP###")
        assert _gone(old)
        obs, info = env.reset(seed=0)
        assert "email" in obs[0]["content"] and env.worker_pids.isdisjoint(old)
        assert _oracle_reward(env) == 1.0
    finally:
        env.close()


# fake workers (the host's side of the protocol against a worker that misbehaves): a valid hello, then one reply
FAKE_REPLIES = {
    "not JSON": "sys.stdout.write('this is not json\\n')",
    "NaN reward": "sys.stdout.write('{\"ok\": true, \"result\": {\"obs\": [], \"reward\": NaN, \"terminated\": "
                  "true, \"truncated\": false, \"info\": {}}}\\n')",
    "infinite reward": "sys.stdout.write('{\"ok\": true, \"result\": {\"obs\": [], \"reward\": 1e999, "
                       "\"terminated\": true, \"truncated\": false, \"info\": {}}}\\n')",
    "not messages": "sys.stdout.write('{\"ok\": true, \"result\": {\"obs\": [{\"role\": \"root\", \"content\": 1}], "
                    "\"reward\": 0.0, \"terminated\": false, \"truncated\": false, \"info\": {}}}\\n')",
    "a bool reward": "sys.stdout.write('{\"ok\": true, \"result\": {\"obs\": [], \"reward\": true, \"terminated\": "
                     "false, \"truncated\": false, \"info\": {}}}\\n')",
    "an error without a message": "sys.stdout.write('{\"ok\": false, \"error\": {\"type\": \"ValueError\"}}\\n')",
    "over 16 MB": "sys.stdout.write('{\"ok\": true, \"result\": \"' + 'x' * (17 * 2**20) + '\"}\\n')",
    "over 16 MB without a newline": "sys.stdout.write('x' * (17 * 2**20)); sys.stdout.flush(); time.sleep(60)",
    "not UTF-8": "sys.stdout.buffer.write(b'{\"ok\": \\xff}\\n')",
    "exits": "sys.exit(3)",
}


@pytest.mark.parametrize("case", sorted(FAKE_REPLIES))
def test_malformed_worker_output_is_a_clear_error(tmp_path, monkeypatch, case):
    _fake_worker(monkeypatch, FAKE_REPLIES[case])
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha, call_timeout_s=20)
    try:
        pids = env.worker_pids
        start = time.monotonic()
        with pytest.raises(WorkerError, match=r"cap_llm_source\.py: the confined worker .* (sent|exited)"):
            env.step("hello")
        assert time.monotonic() - start < 10  # an error at once, never a wait for the time limit
        assert _gone(pids) and not env.worker_pids
    finally:
        env.close()


def _fake_worker(monkeypatch, after_hello: str) -> None:
    """Replace the worker by a script (confined as the worker is) that sends a valid hello and builds the instance,
    then answers the next request with ``after_hello``."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.stdout.write('{{"ok": true, "result": {{"capability": "fake"}}}}\\n')
        sys.stdout.flush()
        sys.stdin.readline()
        sys.stdout.write('{{"ok": true, "result": {{"max_steps": 12, "max_errors": 5, "render_mode": null}}}}\\n')
        sys.stdout.flush()
        sys.stdin.readline()
        {after_hello}
        sys.stdout.flush()
        time.sleep(60)
    """)
    monkeypatch.setattr(Worker, "_python_argv", lambda self, cfg: ["-I", "-c", script])


def test_a_worker_that_says_more_than_it_was_asked_is_stopped(tmp_path, monkeypatch):
    step = ('{"ok": true, "result": {"obs": [{"role": "user", "content": "hi"}], "reward": 0.0, "terminated": false, '
            '"truncated": false, "info": {}}}')
    _fake_worker(monkeypatch, f"sys.stdout.write({step!r} + '\\n' + {step!r} + '\\n')")
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha, call_timeout_s=8)
    try:
        assert env.step("hello")[0] == [{"role": "user", "content": "hi"}]
        time.sleep(0.2)
        with pytest.raises(WorkerError, match="bytes nobody asked for before the step request"):
            env.step("hello")  # the second line must never pass for this step's reply
        assert not env.worker_pids
    finally:
        env.close()


def test_an_interrupted_call_stops_the_worker_and_the_next_reset_works(tmp_path):
    """A caller's own exception mid-call (here a host-side time limit; Ctrl-C alike) leaves a reply in flight: the
    worker is stopped so that no later call reads it."""
    from trace_envs.core.time_limit import CallTimeout, time_limit

    path, sha = _module(tmp_path, SORRY_LOOP)
    env = ConfinedEnv(path, sha)
    try:
        env.reset(seed=0)
        env.step("I'm sorry.")
        pids = env.worker_pids
        with pytest.raises(CallTimeout), time_limit(0.5, "the caller's step"):
            env.step("###STOP###")
        assert _gone(pids) and not env.worker_pids
        with pytest.raises(RuntimeError, match="call reset"):
            env.step("###STOP###")
        obs, _ = env.reset(seed=0)
        assert "email" in obs[0]["content"]
    finally:
        env.close()


def test_a_reply_the_worker_cannot_send_is_an_error_of_that_call(tmp_path):
    """A NaN reward or a 20 MB observation never reaches the host: that call fails, the worker goes on."""
    source = ("import math\n" + GOOD).replace(
        "        return 1.0 if authenticated and handed_over and not wrote else 0.0",
        "        return math.nan if task.facts['topic'] == 'price match' else 0.0").replace(
        '        opening = f"Hi, my email is {email}. I need to {ask}."',
        '        opening = f"Hi, my email is {email}. I need to {ask}." + "!" * (20_000_000 if topic == "account '
        'closure" else 0)')
    path, sha = _module(tmp_path, source)
    env = ConfinedEnv(path, sha)
    try:
        nan_seed = big_seed = None
        for seed in range(40):
            try:
                obs, _ = env.reset(seed=seed)
            except ValueError as exc:
                assert "over the 16,777,216-byte limit" in str(exc) and "cap_llm_source.py" in str(exc)
                big_seed = seed if big_seed is None else big_seed
                continue
            if nan_seed is None and "price match" in obs[0]["content"]:
                nan_seed = seed
        assert big_seed is not None and nan_seed is not None
        pids = env.worker_pids
        env.reset(seed=nan_seed)
        with pytest.raises(ValueError, match="not finite JSON"):
            env.step("###STOP###")
        assert env.worker_pids == pids  # the same worker serves the next call
        env.reset(seed=nan_seed)
    finally:
        env.close()


def test_an_env_that_cannot_be_built_fails_at_make_as_in_process(tmp_path):
    env_id = "trace/confined_bad_kwargs-v0"
    _register(tmp_path, GOOD, env_id)
    try:
        with pytest.raises(ValueError, match=r"max_errors.*cap_llm_source\.py, in its confined worker"):
            gym.make(env_id, max_errors=0)
        with pytest.raises(ValueError, match="max_errors"):
            gym.make(env_id, max_errors=0, confined=False)
        with pytest.raises(TypeError, match="JSON values"):
            gym.make(env_id, domain=object())
    finally:
        gym.registry.pop(env_id, None)


def test_close_collection_and_exit_leave_no_worker_process(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha)
    env.reset(seed=0)
    pids, tmp = env.worker_pids, env._worker.box.tmp
    assert len(pids) >= 2 and tmp.is_dir()
    env.close()
    assert _gone(pids) and not tmp.exists() and not env.worker_pids
    env.close()  # twice is fine

    dropped = ConfinedEnv(path, sha)
    pids = dropped.worker_pids
    del dropped
    gc.collect()
    assert _gone(pids)

    code = (f"from trace_envs.synthesis.llm.confined_env import ConfinedEnv\n"
            f"env = ConfinedEnv({path!r}, {sha!r})\nenv.reset(seed=0)\n"
            "print(sorted(env.worker_pids), env._worker.box.tmp)\n")  # exits with the worker running
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    listed, tmp = out.stdout.strip().rsplit(" ", 1)
    assert len(json.loads(listed)) >= 2 and _gone(set(json.loads(listed))) and not Path(tmp).exists()
