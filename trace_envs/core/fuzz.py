"""Hostile-action fuzzing for tool-use envs: the one generator the tests and ``benchmarks/fuzz_envs.py`` share.

``ActionFuzzer`` draws actions from a seeded ``numpy.random.Generator``: valid tool calls of the env's
own tools (arguments typed from the schemas, values partly harvested from earlier observations so
calls reach real tool code), random mutations of them, random bytes and Unicode (lone surrogates
included), huge strings, wrong types, unknown tools, nesting deeper than any parser recursion limit,
integer literals past Python's int/str digit limit, and malformed message dicts. ``fuzz_env`` steps an
env with them and counts what escapes ``step``/``reset`` and every transcript that cannot be written
as UTF-8 JSON.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

_TOKEN = re.compile(r"[#\w][\w.@+-]{1,38}\w")
_ID_LIKE = re.compile(r"[\d#@_]")
_SPECIALS = '{}[]",:\\ \n\t<>/'
_TAGS = ("<tool_call>", "</tool_call>", "<tool_call><tool_call>", "</tool_call></tool_call>")
_NESTING_DEPTHS = (33, 200, 999, 1000, 1001, 3000, 20_000)
_INT_DIGITS = (4000, 4300, 4301, 5000, 20_000)
# For a ``calculate``-style ``expression`` argument: exponent towers (a hang if evaluated), deep
# parentheses, division by zero, literals past the int digit limit, long products.
_EXPRESSIONS = ("9**9**9**9", "2**10", "9**99999", "(" * 300 + "1" + ")" * 300, "(" * 60 + "1" + ")" * 60, "1/0",
                "9" * 5000, "99999999*" * 500 + "9", "-" * 500 + "1", "1e400", "1.5.5", "()", "1+", "0.1+0.2", "10/3")
_JSON_ODDITIES = ("NaN", "Infinity", "-Infinity", "1e999", "-0", "1e-999", "0.1e+400", "null", "true",
                  '"\\u0000"', '"\\ud800"', '"\\udfff\\ud800"', '"\\ud83d\\ude00"', "[]", "{}", '""')


@dataclass
class ActionFuzzer:
    """Seeded hostile-action generator; ``start`` it with each episode's reset info, ``observe`` each obs."""

    rng: np.random.Generator
    tools: list[dict[str, Any]] = field(default_factory=list)
    pool: list[str] = field(default_factory=list)  # strings seen in observations (ids, emails, ...)

    def start(self, observation: list[dict[str, Any]], info: dict[str, Any]) -> None:
        self.tools = [t for t in info.get("tools") or [] if isinstance(t, dict) and "function" in t]
        self.pool = []  # ids of an earlier episode would only be "not found"
        self.observe(observation)

    def observe(self, observation: list[dict[str, Any]]) -> None:
        for message in observation:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                self.pool.extend(_TOKEN.findall(content[:4000])[:20])
        if len(self.pool) > 400:
            del self.pool[:-400]

    # -- drawing --------------------------------------------------------------------------------
    def draw(self) -> tuple[str, Any]:
        """One ``(kind, action)``; kinds are the names of ``_KINDS``."""
        names, weights = zip(*((name, w) for name, (w, _) in _KINDS.items()))
        p = np.asarray(weights, dtype=float)
        kind = names[int(self.rng.choice(len(names), p=p / p.sum()))]
        return kind, _KINDS[kind][1](self)

    def _pick(self, seq: Any) -> Any:
        return seq[int(self.rng.integers(len(seq)))]

    def _chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def _word(self, max_len: int = 12) -> str:
        n = int(self.rng.integers(0, max_len + 1))
        return "".join(chr(c) for c in self.rng.integers(97, 123, size=n))

    def _unicode(self, max_len: int = 40) -> str:
        """Arbitrary code points: controls, surrogates, private use, astral, noncharacters."""
        n = int(self.rng.integers(0, max_len + 1))
        return "".join(chr(int(c)) for c in self.rng.integers(0, 0x110000, size=n))

    def _surrogate(self) -> str:
        return chr(int(self.rng.integers(0xD800, 0xE000)))

    def _string(self) -> str:
        r = self.rng.random()
        ids = [t for t in self.pool if _ID_LIKE.search(t)]
        if r < 0.5 and ids:
            return self._pick(ids)
        if r < 0.6 and self.pool:
            return self._pick(self.pool)
        if r < 0.72:
            return self._word()
        if r < 0.76:
            return self._word() + self._surrogate() + self._word()
        if r < 0.84:
            return self._unicode()
        if r < 0.9:
            return f"#W{int(self.rng.integers(0, 10**7)):07d}"
        return self._pick(["", " ", "null", "0", "-1", "###STOP###", "transfer_to_human_agents", "\x00", "'\""])

    def _json_value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth > 2 or r < 0.55:
            return self._pick([None, True, False, 0, -1, 2**63, -(2**64) + 1, 1.5, float("nan"), float("inf"),
                               -0.0, 1e308, self._string(), self._string(), int(self.rng.integers(-10**6, 10**6))])
        if r < 0.8:
            return [self._json_value(depth + 1) for _ in range(int(self.rng.integers(0, 4)))]
        return {self._string(): self._json_value(depth + 1) for _ in range(int(self.rng.integers(0, 4)))}

    def _typed(self, schema: Any) -> Any:
        """A value of the schema's type (mostly), or of a wrong type (sometimes)."""
        if not isinstance(schema, dict) or self._chance(0.1):
            return self._json_value()
        if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"] and self._chance(0.7):
            return self._pick(schema["enum"])
        kind = schema.get("type")
        if kind == "string":
            return self._string()
        if kind == "integer":
            return self._pick([0, 1, -1, 7, 10**18, int(self.rng.integers(-100, 10_000))])
        if kind == "number":
            return self._pick([0, 0.5, -3.25, 1e300, float("nan"), float("inf"), float(self.rng.normal() * 100)])
        if kind == "boolean":
            return self._chance(0.5)
        if kind == "array":
            return [self._typed(schema.get("items")) for _ in range(int(self.rng.integers(0, 4)))]
        if kind == "object":
            props = schema.get("properties") or {}
            return {k: self._typed(v) for k, v in props.items() if self._chance(0.8)}
        return self._json_value()

    def _tool(self) -> dict[str, Any]:
        return self._pick(self.tools)["function"] if self.tools else {"name": "calculate", "parameters": {}}

    def _valid_call(self) -> tuple[str, dict[str, Any]]:
        fn = self._tool()
        params = fn.get("parameters") or {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        args = {k: self._typed(v) for k, v in props.items() if k in required or self._chance(0.3)}
        if "expression" in args and self._chance(0.5):
            args["expression"] = self._pick(_EXPRESSIONS)
        return str(fn.get("name", "")), args

    def _render(self, name: Any, args: Any, ascii_only: bool | None = None) -> Any:
        """A call in one of the forms the parser accepts: Hermes text, bare JSON, OpenAI dict, name dict."""
        ascii_only = self._chance(0.7) if ascii_only is None else ascii_only
        form = self._pick(["hermes", "hermes", "hermes", "bare", "openai_str", "openai_obj", "name_dict"])
        if form in ("openai_obj", "name_dict"):
            if form == "name_dict":
                return {"name": name, "arguments": args}
            return {"role": "assistant", "content": "",
                    "tool_calls": [{"id": self._word(6), "type": "function",
                                    "function": {"name": name, "arguments": args}}]}
        try:
            payload = json.dumps({"name": name, "arguments": args}, ensure_ascii=ascii_only)
        except (TypeError, ValueError, RecursionError):
            return {"name": name, "arguments": args}
        if form == "openai_str":
            return {"role": "assistant", "content": self._word(),
                    "tool_calls": [{"id": "c1", "function": {"name": name, "arguments": json.dumps(args)}}]}
        if form == "bare":
            return payload
        prefix = self._pick(["", "Let me check.\n", self._unicode(10)])
        return f"{prefix}<tool_call>\n{payload}\n</tool_call>"


# -- kinds --------------------------------------------------------------------------------------
def _valid(f: ActionFuzzer) -> Any:
    return f._render(*f._valid_call())


def _mutated(f: ActionFuzzer) -> Any:
    text = f._render(*f._valid_call(), ascii_only=f._chance(0.5))
    if not isinstance(text, str):
        text = json.dumps(text, default=str)
    for _ in range(int(f.rng.integers(1, 6))):
        op = int(f.rng.integers(6))
        i = int(f.rng.integers(len(text) + 1))
        j = min(len(text), i + int(f.rng.integers(1, 12)))
        if op == 0:
            text = text[:i] + text[j:]
        elif op == 1:
            text = text[:i] + "".join(f._pick(_SPECIALS) for _ in range(int(f.rng.integers(1, 5)))) + text[i:]
        elif op == 2:
            text = text[:i] + text[i:j] * int(f.rng.integers(2, 6)) + text[j:]
        elif op == 3:
            text = text[:i]
        elif op == 4:
            text = text[:i] + f._pick(_TAGS) + text[i:]
        else:
            text = text[:i] + f._unicode(3) + text[j:]
    return text


def _wrong_types(f: ActionFuzzer) -> Any:
    name, args = f._valid_call()
    args = {k: f._json_value() for k in args} or {f._string(): f._json_value()}
    if f._chance(0.3):
        args = f._pick([[1, 2], "{}", 3, None, True, "not json", '{"a": 1', "[" * 40])
    if f._chance(0.15):
        name = f._pick([None, 7, ["x"], {"n": 1}, "", "   "])
    return f._render(name, args)


def _unknown_tool(f: ActionFuzzer) -> Any:
    name, args = f._valid_call()
    name = f._pick([f._word(), name.upper(), name + "_v2", " " + name + " ", name + f._surrogate(), f._unicode(8),
                    "rm -rf /", "__import__", "x" * 5000])
    return f._render(name, args)


_RAW_FORMS = ("arg", "bare", "arguments_str")


def _raw_call(name: str, form: str, arguments: str) -> Any:
    """A call of ``name`` whose arguments are the raw JSON text ``arguments``, as a model writes it: in
    ``<tool_call>`` tags (``arg``), a bare JSON object (``bare``) or an OpenAI-style message (``arguments_str``)."""
    if form == "arg":
        return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'
    if form == "bare":
        return f'{{"name": "{name}", "arguments": {arguments}}}'
    return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}


def _deep(f: ActionFuzzer) -> Any:
    depth = int(f._pick(_NESTING_DEPTHS))
    opener, closer = f._pick([("[", "]"), ('{"a":', "}"), ('{"a":[', "]}")])
    closed = f._chance(0.8)
    text = opener * depth + "1" + (closer * depth if closed else "")
    name, _ = f._valid_call()
    where = f._pick(["arg", "body", "bare", "arguments_str", "python"])
    if where == "body":
        return f"<tool_call>{text}</tool_call>"
    if where in _RAW_FORMS:
        return _raw_call(name, where, f'{{"x": {text}}}' if where == "arg" else text)
    value: Any = 1
    for _ in range(depth):  # a Python object nested past the recursion limit (no recursion to build it)
        value = [value]
    return {"name": name, "arguments": {"x": value}}


def _big_int(f: ActionFuzzer) -> Any:
    digits = int(f._pick(_INT_DIGITS))
    literal = f._pick(["", "-"]) + "9" * digits
    name, _ = f._valid_call()
    where = f._pick(["arg", "bare", "arguments_str", "python", "oddity"])
    if where in _RAW_FORMS:
        return _raw_call(name, where, f'{{"x": {literal}}}')
    if where == "python":
        return {"name": name, "arguments": {"x": 10 ** min(digits, 6000)}}
    return _raw_call(name, "arg", f'{{"x": {f._pick(_JSON_ODDITIES)}}}')


def _surrogates(f: ActionFuzzer) -> Any:
    name, args = f._valid_call()
    key = next(iter(args), "x")
    bad = f._word(4) + f._surrogate() + f._word(4)
    where = f._pick(["arg_raw", "arg_escaped", "text", "name", "key", "dict_content"])
    if where == "arg_raw":  # the character itself in the text
        return f._render(name, {**args, key: bad}, ascii_only=False)
    if where == "arg_escaped":  # a \udXXX escape that json.loads turns into a lone surrogate
        return f._render(name, {**args, key: bad}, ascii_only=True)
    if where == "text":
        return f"I will help{f._surrogate()} you. {f._word()}?"
    if where == "name":
        return f._render(name + f._surrogate(), args)
    if where == "key":
        return f._render(name, {bad: 1, **args})
    return {"role": "assistant", "content": bad, "tool_calls": []}


def _random_bytes(f: ActionFuzzer) -> Any:
    raw = f.rng.bytes(int(f.rng.integers(0, 300)))
    text = raw.decode("utf-8", errors=f._pick(["surrogateescape", "replace", "ignore"]))
    return f._pick(["", "<tool_call>"]) + text


def _random_unicode(f: ActionFuzzer) -> Any:
    return f._unicode(200)


def _huge(f: ActionFuzzer) -> Any:
    n = int(f.rng.integers(10_000, 60_000))
    unit = f._pick(["x", "<tool_call>", "{", "[", '"', "\\", "9", "? ", "\ud800", "é"])
    if f._chance(0.5):
        return unit * (n // len(unit))
    name, args = f._valid_call()
    return f._render(name, {**args, next(iter(args), "x"): unit * (n // len(unit))})


def _malformed_dict(f: ActionFuzzer) -> Any:
    return f._pick([
        {"role": "assistant", "content": f._json_value(), "tool_calls": f._json_value()},
        {"role": "assistant", "tool_calls": "not a list"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": f._json_value()}]},
        {"role": "assistant", "tool_calls": [{"id": 10**5000 if f._chance(0.2) else 3, "function": {"name": "x"}}]},
        {"role": "user", "content": f._string()},
        {"tool_calls": [None, 1, "x", [], {}]},
        {"name": f._json_value(), "arguments": f._json_value()},
        {f._string(): f._json_value()},
        {1: 2, (1, 2): 3},
        {"name": "x", "arguments": {"s": {1, 2}, "b": b"bytes"}},
        {},
    ])


def _non_text(f: ActionFuzzer) -> Any:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    loop: dict[str, Any] = {"name": "x"}
    loop["arguments"] = loop
    return f._pick([None, 0, 1.5, b"<tool_call>", ["<tool_call>"], ("a",), {"a"}, object(), cyclic, loop,
                    bytearray(b"x"), float("nan")])


def _control(f: ActionFuzzer) -> Any:
    return f._pick(["", " ", "\n", "###STOP###", "###TRANSFER###", "?", "Could you confirm your email?",
                    "<tool_call></tool_call>", "<tool_call>", "</tool_call>", "{}", '{"name": "x"}',
                    f"{f._word()} ###STOP### {f._word()}", '<tool_call>{"name": "transfer_to_human_agents", '
                    '"arguments": {"summary": "x"}}</tool_call>'])


def _multi(f: ActionFuzzer) -> Any:
    parts = [_valid(f) if f._chance(0.6) else _mutated(f) for _ in range(int(f.rng.integers(2, 9)))]
    return "\n".join(p if isinstance(p, str) else json.dumps(p, default=str) for p in parts)


# name -> (weight, generator)
_KINDS: dict[str, tuple[float, Callable[[ActionFuzzer], Any]]] = {
    "valid": (3.0, _valid),
    "mutated": (3.0, _mutated),
    "wrong_types": (1.5, _wrong_types),
    "unknown_tool": (1.0, _unknown_tool),
    "deep_nesting": (1.0, _deep),
    "big_int": (1.0, _big_int),
    "surrogates": (1.0, _surrogates),
    "random_bytes": (0.7, _random_bytes),
    "random_unicode": (0.7, _random_unicode),
    "huge": (0.3, _huge),
    "malformed_dict": (1.0, _malformed_dict),
    "non_text": (0.5, _non_text),
    "control": (0.7, _control),
    "multi_call": (0.6, _multi),
}
FUZZ_KINDS = tuple(_KINDS)


# -- running --------------------------------------------------------------------------------------
@dataclass
class FuzzFailure:
    """One exception that escaped the env (``stage`` is ``step`` or ``reset``) or an unwritable transcript."""

    stage: str
    kind: str
    error: str


@dataclass
class FuzzReport:
    env_id: str
    actions: int = 0
    episodes: int = 0
    escaped: int = 0
    bad_steps: int = 0  # observation outside the space, non-float reward, or an episode past max_steps
    unwritable_transcripts: int = 0  # steps whose new transcript entries are not UTF-8 JSON
    kinds: Counter = field(default_factory=Counter)
    failures: list[FuzzFailure] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.escaped or self.bad_steps or self.unwritable_transcripts)


def transcript_writable(messages: Any) -> bool:
    """True iff ``messages`` serialise as one UTF-8 JSON line that reads back equal in length."""
    try:
        line = json.dumps(messages, ensure_ascii=False).encode("utf-8")
        return len(json.loads(line.decode("utf-8"))) == len(messages)
    except (TypeError, ValueError, RecursionError):
        return False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def fuzz_env(env: Any, n_actions: int, seed: int = 0, env_id: str = "", keep: int = 20) -> FuzzReport:
    """Step ``env`` with ``n_actions`` fuzzed actions (seeded); reset whenever an episode ends or
    something escapes. Returns the counts and the first ``keep`` failures."""
    rng = np.random.default_rng(seed)
    fuzzer = ActionFuzzer(rng)
    report = FuzzReport(env_id=env_id or getattr(getattr(env, "spec", None), "id", "") or type(env).__name__)

    def fail(stage: str, kind: str, error: str) -> None:
        if len(report.failures) < keep:
            report.failures.append(FuzzFailure(stage, kind, error))

    def reset() -> bool:
        report.episodes += 1
        try:
            obs, info = env.reset(seed=int(rng.integers(2**31)))
        except Exception as exc:  # counted, not hidden: an env that cannot reset is a finding
            report.escaped += 1
            fail("reset", "-", _describe(exc))
            return False
        fuzzer.start(obs, info)
        return True

    seen = 0  # transcript entries already checked

    def check_transcript(kind: str) -> None:
        nonlocal seen
        transcript = getattr(env.unwrapped, "transcript", None)
        if transcript is None:
            return
        if not transcript_writable(transcript[seen:]):
            report.unwritable_transcripts += 1
            fail("transcript", kind, "new transcript entries are not writable as UTF-8 JSON")
        seen = len(transcript)

    max_steps = getattr(env.unwrapped, "max_steps", None)
    live, steps = reset(), 0
    for _ in range(n_actions):
        if not live:
            live, steps, seen = reset(), 0, 0
            if not live:
                continue
        kind, action = fuzzer.draw()
        report.actions += 1
        report.kinds[kind] += 1
        try:
            obs, reward, terminated, truncated, _info = env.step(action)
        except Exception as exc:
            report.escaped += 1
            fail("step", kind, _describe(exc))
            live = False
            continue
        steps += 1
        live = not (terminated or truncated)
        if not (env.observation_space.contains(obs) and isinstance(reward, float)):
            report.bad_steps += 1
            fail("observation", kind, f"observation/reward outside the spaces ({type(reward).__name__})")
        elif live and max_steps is not None and steps >= max_steps:
            report.bad_steps += 1
            fail("observation", kind, f"episode still running after max_steps={max_steps}")
        fuzzer.observe(obs)
        check_transcript(kind)
    return report
