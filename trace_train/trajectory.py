"""Re-export of :mod:`trace_envs.records` (the trajectory record moved to the bottom of the house).

Kept so that existing imports (``from trace_train.trajectory import TrajectoryRecord``) keep working;
library code imports ``trace_envs.records`` directly.
"""

from trace_envs.records import (  # noqa: F401  (re-exports)
    RECORD_FIELD_KEYS,
    SCHEMA_VERSION,
    OutputBusyError,
    ReadReport,
    RecordError,
    RecordInfo,
    TerminalInfo,
    TrajectoryRecord,
    TurnTokens,
    append_jsonl,
    compact_text,
    drop_rows_from,
    dumps_line,
    exclusive_output,
    format_valid_fraction,
    iter_jsonl,
    iter_jsonl_numbered,
    iter_trajectory_rows,
    read_trajectories,
    record_info,
    task_capabilities,
    terminal_extras,
    validate_record,
    write_json_atomic,
    write_jsonl_atomic,
    write_text_atomic,
    write_trajectories,
)
