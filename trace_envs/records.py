"""The trajectory record: the common currency of rollout, analysis, training, evaluation and report.

It lives at the bottom of the house (beside ``trace_envs.atomic_io``) so that every layer can read and
write records without importing a higher one: ``trace_envs`` (τ² runner), ``trace_moe`` and
``trace_train`` all import it from here (``trace_train.trajectory`` re-exports it).

One record per episode, stored as one JSON line. Files are written atomically (temp file + rename);
the reader validates every line against the record schema (a bad line names its file, line and
field) and survives a truncated last line (a crash mid-append), which it reports.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, TypedDict

from trace_envs.atomic_io import write_text_atomic  # re-exported: one place for atomic writes

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class TerminalInfo(TypedDict, total=False):
    """The ``info`` of an env's last ``step`` (terminated or truncated): the typed contract between the
    envs (``trace_envs.core.tool_env.ToolUseEnv``) and every reader of an episode's end.

    ``reward``, ``success``, ``reward_breakdown`` and ``termination`` become the record's own fields;
    ``transcript`` (every message, system prompt first) becomes its ``messages``; the rest is kept in
    the record's ``info``. Envs may add their own diagnostics (``nl_assertions``, ``end_db_hash`` ...).
    """

    reward: float
    success: bool
    reward_breakdown: dict[str, float]
    termination: str
    transcript: list[dict[str, Any]]
    format_valid_fraction: float
    steps: int
    errors: int


# Terminal info keys that become record fields (not copied into ``TrajectoryRecord.info``).
RECORD_FIELD_KEYS = frozenset({"reward", "success", "reward_breakdown", "termination", "transcript"})


class RecordInfo(TypedDict, total=False):
    """The keys of ``TrajectoryRecord.info`` that the report, the metrics and the trainer read.

    Written by the rollout backends: the env's terminal extras (:class:`TerminalInfo` less
    :data:`RECORD_FIELD_KEYS`), the reset ``task``/``tools``, the request's ``group``/``sample_seed``,
    and (model backends) token accounting. ``env_error`` is set when the env raised.
    """

    task: dict[str, Any] | None
    tools: list[dict[str, Any]] | None
    group: int
    sample_seed: int
    format_valid_fraction: float
    steps: int
    errors: int
    turn_spans: list[list[int]]
    generated_tokens: int
    hint: str
    env_error: dict[str, Any]
    capability: str
    required_capabilities: list[str]
    id_args_valid: int
    id_args_total: int


def task_capabilities(info: RecordInfo | dict[str, Any]) -> list[str] | None:
    """The capabilities the episode's task needs: ``info['task']['required_capabilities']``, else
    ``info['required_capabilities']`` (envs without a task annotation); None when neither is there."""
    task = info.get("task")
    caps = task.get("required_capabilities") if isinstance(task, dict) else None
    if caps is None:
        caps = info.get("required_capabilities")
    return [str(c) for c in caps] if isinstance(caps, (list, tuple)) else None


def format_valid_fraction(info: RecordInfo | dict[str, Any] | None) -> float | None:
    """``info['format_valid_fraction']`` as a float (None when the backend did not report it)."""
    value = info.get("format_valid_fraction") if info else None
    return None if value is None else float(value)


def terminal_extras(info: dict[str, Any]) -> dict[str, Any]:
    """The part of a terminal ``info`` that goes into ``TrajectoryRecord.info`` (record fields dropped)."""
    return {k: v for k, v in info.items() if k not in RECORD_FIELD_KEYS}


def record_info(record: "TrajectoryRecord") -> RecordInfo:
    """``record.info`` typed as :class:`RecordInfo` (a record read from disk carries what was written)."""
    return record.info  # type: ignore[return-value]


@dataclass
class TurnTokens:
    """Token-level record of one policy turn, as produced by our rollout backends.

    ``prompt_ids`` are the ids the model was conditioned on for this turn, ``completion_ids`` the
    ids it sampled, ``logprobs`` the sampler's log-probability of each completion id.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]


class RecordError(ValueError):
    """A trajectory row that does not match the record schema (the message names where and which field)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _check_messages(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be a list of message dicts"
    for i, msg in enumerate(value):
        if not isinstance(msg, dict):
            return f"item {i} must be a message dict, got {_describe(msg)}"
        if not isinstance(msg.get("role"), str):
            return f"item {i} must have a string 'role', got {_describe(msg.get('role'))}"
        content = msg.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"item {i} 'content' must be a string, a list or null, got {_describe(content)}"
    return None


def _check_list(all_ok: Callable[[list], bool], item_ok: Callable[[Any], bool], items: str,
                item: str) -> Callable[[Any], str | None]:
    """A null-or-list check: ``all_ok`` is the fast whole-list test (token lists are long), ``item_ok``
    finds the first bad item for the message."""
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, list):
            return f"must be null or a list of {items}"
        if all_ok(value):
            return None
        for i, entry in enumerate(value):
            if not item_ok(entry):
                return f"item {i} must be {item}, got {_describe(entry)}"
        return None

    return check


def _all_ints(value: list) -> bool:
    return all(type(v) is int for v in value)  # bool is not int here


def _all_numbers(value: list) -> bool:
    return all(type(v) is float or type(v) is int for v in value)


def _simple(ok: Callable[[Any], bool], what: str) -> Callable[[Any], str | None]:
    return lambda value: None if ok(value) else f"must be {what}"


# field -> (required, check returning None or what is wrong). Mirrors TrajectoryRecord below.
_FIELDS: dict[str, tuple[bool, Callable[[Any], str | None]]] = {
    "env_id": (True, _simple(lambda v: isinstance(v, str) and bool(v), "a non-empty string")),
    "seed": (True, _simple(_is_int, "an integer")),
    "messages": (True, _check_messages),
    "reward": (True, _simple(lambda v: _is_number(v) and math.isfinite(v), "a finite number")),
    "success": (True, _simple(lambda v: isinstance(v, bool), "a bool (true or false)")),
    "termination": (True, _simple(lambda v: isinstance(v, str), "a string")),
    "policy": (False, _simple(lambda v: isinstance(v, str), "a string")),
    "reward_breakdown": (False, _simple(lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and _is_number(x) for k, x in v.items()), "a dict of name -> number")),
    "info": (False, _simple(lambda v: isinstance(v, dict), "a dict")),
    "token_ids": (False, _check_list(lambda v: _all_ints(v) and min(v, default=0) >= 0,
                                     lambda v: _is_int(v) and v >= 0, "ids", "a non-negative integer")),
    "loss_mask": (False, _check_list(lambda v: _all_ints(v) and set(v) <= {0, 1},
                                     lambda v: _is_int(v) and v in (0, 1), "0s and 1s", "0 or 1")),
    "logprobs": (False, _check_list(_all_numbers, _is_number, "numbers", "a number")),
    "episode_id": (False, _simple(lambda v: isinstance(v, str), "a string")),
    "schema_version": (False, _simple(lambda v: _is_int(v) and v >= 1, "a positive integer")),
}


def validate_record(data: Any, where: str = "record") -> dict[str, Any]:
    """Check one row against the trajectory schema and return it; raise :class:`RecordError` naming ``where``.

    Every field's type is checked (``success`` must be a JSON bool: ``"false"`` is an error, not a
    pass), required fields must be present, and token ids, loss mask and log-probs must align.
    Unknown keys are allowed (readers may add their own, e.g. ``capability``).
    """
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a trajectory record must be a JSON object, got {_describe(data)}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if _is_int(version) and version > SCHEMA_VERSION:
        raise RecordError(f"{where}: trajectory schema {version} is newer than this trace-rl ({SCHEMA_VERSION})")
    for name, (required, check) in _FIELDS.items():
        if name not in data:
            if required:
                raise RecordError(f"{where}: required field {name!r} is missing")
            continue
        problem = check(data[name])
        if problem is not None:
            got = "" if ", got " in problem else f", got {_describe(data[name])}"  # item checks say it
            raise RecordError(f"{where}: field {name!r} {problem}{got}")
    ids = data.get("token_ids")
    for name in ("loss_mask", "logprobs"):
        other = data.get(name)
        if ids is not None and other is not None and len(other) != len(ids):
            raise RecordError(f"{where}: field {name!r} has {len(other)} entries for {len(ids)} token_ids")
    return data


@dataclass
class TrajectoryRecord:
    """One episode of one policy on one env seed."""

    env_id: str
    seed: int
    messages: list[dict[str, Any]]
    reward: float
    success: bool
    termination: str
    policy: str = "unknown"
    reward_breakdown: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    # Token-level data (our backends only): the full sequence ids, the loss mask (1 only on
    # tokens the policy sampled) and sampler log-probs aligned with ``token_ids`` (0.0 where masked).
    token_ids: list[int] | None = None
    loss_mask: list[int] | None = None
    logprobs: list[float] | None = None
    episode_id: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not self.episode_id:
            self.episode_id = f"{self.env_id}|{self.seed}|{self.policy}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "record") -> TrajectoryRecord:
        """Build a record from a validated row (see :func:`validate_record`); unknown keys are ignored."""
        validate_record(data, where)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def dumps_line(row: Any) -> str:
    """One JSONL line. Non-ASCII stays readable; a string UTF-8 cannot encode (a lone surrogate such
    as U+D800) makes the line fall back to ASCII ``\\uXXXX`` escapes, which read back to the same string."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(row, ensure_ascii=True)
    return text + "\n"


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSONL to ``path`` atomically."""
    return write_text_atomic(path, "".join(dumps_line(row) for row in rows))


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """Write one JSON document atomically (lone surrogates are escaped, as in :func:`dumps_line`)."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj, indent=indent, ensure_ascii=True, default=str)
    return write_text_atomic(path, text)


def _drop_partial_last_line(path: Path) -> None:
    """A crash mid-append leaves a last line without its newline; appending after it would glue the next
    row onto it and turn it into an unreadable inner line, so cut it off (it is unrecoverable anyway)."""
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        block, pos = b"", size
        while pos > 0 and b"\n" not in block:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step) + block
        keep = pos + block.rfind(b"\n") + 1  # 0 when the file has no complete line
        fh.truncate(keep)
    logger.warning("%s: dropped a partial last line of %d bytes (crash mid-append?) before appending",
                   path, size - keep)


def append_jsonl(path: str | os.PathLike, row: dict[str, Any]) -> None:
    """Append one line (for streaming writers); a crash can only truncate the last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        _drop_partial_last_line(path)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(dumps_line(row))
        fh.flush()


def split_jsonl_lines(text: str) -> list[str]:
    """The lines of JSONL ``text``, split at ``\n`` only: ``str.splitlines`` also breaks at U+2028, U+2029,
    U+0085 and other separators, which :func:`dumps_line` leaves raw inside JSON strings (model text and tool
    output can hold them)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return lines


@dataclass
class ReadReport:
    rows: int = 0
    truncated_last_line: bool = False
    bad_lines: list[int] = field(default_factory=list)


def iter_jsonl_numbered(path: str | os.PathLike, report: ReadReport | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(1-based line number, JSON value)``. A broken last line without its newline (a crash
    mid-append, possibly inside a multi-byte character) is reported and skipped; any other broken line
    raises ``ValueError`` naming file and line."""
    report = report if report is not None else ReadReport()
    data = Path(path).read_bytes()
    lines = data.split(b"\n")  # bytes: a cut inside a UTF-8 character only spoils its own line
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
            if not line.strip():
                continue
            row = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if number == len(lines) and not data.endswith(b"\n"):
                report.truncated_last_line = True
                logger.warning("%s: last line %d is truncated (crash mid-write?); skipped", path, number)
                continue
            report.bad_lines.append(number)
            what = "not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else "not valid JSON"
            raise ValueError(f"{path}:{number}: {what} ({exc})") from exc
        report.rows += 1
        yield number, row


def iter_jsonl(path: str | os.PathLike, report: ReadReport | None = None) -> Iterator[Any]:
    """Yield the JSON value of each line (see :func:`iter_jsonl_numbered`); no schema check."""
    for _, row in iter_jsonl_numbered(path, report):
        yield row


def iter_trajectory_rows(path: str | os.PathLike, report: ReadReport | None = None) -> Iterator[dict[str, Any]]:
    """Yield the rows of a trajectory file as dicts, each validated (:func:`validate_record`)."""
    for number, row in iter_jsonl_numbered(path, report):
        yield validate_record(row, f"{path}:{number}")


def drop_rows_from(path: str | os.PathLike, key: str, start: int) -> None:
    """Forget the logged rows whose ``key`` is >= ``start``: a run resumed from a checkpoint replays them."""
    if Path(path).exists():
        write_jsonl_atomic(path, [row for row in iter_jsonl(path) if int(row.get(key, -1)) < start])


def write_trajectories(path: str | os.PathLike, records: Iterable[TrajectoryRecord]) -> Path:
    """Write records atomically; each is validated first, so what is written reads back."""
    rows = [validate_record(r.to_dict(), f"record {i} for {path}") for i, r in enumerate(records)]
    return write_jsonl_atomic(path, rows)


def read_trajectories(path: str | os.PathLike, report: ReadReport | None = None) -> list[TrajectoryRecord]:
    """Read and validate a trajectory file; a bad line raises :class:`RecordError` naming file, line and field."""
    return [TrajectoryRecord.from_dict(row, f"{path}:{number}") for number, row in iter_jsonl_numbered(path, report)]


class OutputBusyError(RuntimeError):
    """Another process holds the lock of an output file."""


@contextmanager
def exclusive_output(path: str | os.PathLike) -> Iterator[Path]:
    """Hold an exclusive lock on ``<path>.lock`` (``fcntl.flock``, released on exit or process death).

    Fails at once with :class:`OutputBusyError` when another process holds it, so two writers of
    the same output never interleave. The lock file stays (removing it would race a new locker).
    """
    import fcntl

    path = Path(path)
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f" by pid {holder}" if holder.isdigit() else ""
            raise OutputBusyError(f"{path} is being written{who} (lock {lock} is held); wait for that run "
                                  f"to finish or choose another out=") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield path
    finally:
        os.close(fd)


def _content_text(content: Any) -> str:
    """A message's content as text: a string as is; OpenAI content parts (which the schema allows) joined,
    a part without text shown by its type (e.g. ``<image_url>``)."""
    if isinstance(content, list):
        return "".join(part["text"] if isinstance(part, dict) and isinstance(part.get("text"), str)
                       else f"<{part.get('type', '?') if isinstance(part, dict) else type(part).__name__}>"
                       for part in content)
    return content or ""


def compact_text(record: TrajectoryRecord, max_tool_chars: int = 300) -> str:
    """The compact text form the analysis step reads: one line per message, tool output clipped."""
    head = (
        f"[trajectory {record.episode_id}] env={record.env_id} seed={record.seed} "
        f"reward={record.reward:.2f} success={record.success} end={record.termination}"
    )
    lines = [head]
    for msg in record.messages:
        role = msg.get("role", "?")
        content = _content_text(msg.get("content"))
        if role == "tool" and len(content) > max_tool_chars:
            content = content[:max_tool_chars] + " …"
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            content += f" <call {fn.get('name')}({fn.get('arguments')})>"
        lines.append(f"{role}: {content.strip()}")
    return "\n".join(lines)
