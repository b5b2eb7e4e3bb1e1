"""Label vocabulary of the contrastive capability analysis (paper §2.3).

Every (trajectory, capability) pair gets one of three labels in each labeling run:
``NA`` (the task does not need the capability), ``PRESENT`` (needed and demonstrated) or
``LACKING`` (needed and not demonstrated). A pair a labeler failed to answer is *missing*: it is
recorded as such and excluded from the statistics, never silently counted as ``NA``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from trace_envs.records import TrajectoryRecord


class Label(str, enum.Enum):
    NA = "NA"
    PRESENT = "PRESENT"
    LACKING = "LACKING"

    @classmethod
    def parse(cls, value: object) -> Label | None:
        """Map a labeler's spelling (``"n/a"``, ``"present"``, ``"Lacking"`` …) to a Label, else None."""
        if isinstance(value, Label):
            return value
        if not isinstance(value, str):
            return None
        text = value.strip().upper().replace("/", "").replace("-", "_").replace(" ", "_")
        aliases = {
            "NA": cls.NA, "N_A": cls.NA, "NOT_APPLICABLE": cls.NA, "NONE": cls.NA,
            "PRESENT": cls.PRESENT, "DEMONSTRATED": cls.PRESENT,
            "LACKING": cls.LACKING, "LACK": cls.LACKING, "ABSENT": cls.LACKING, "MISSING": cls.LACKING,
        }
        return aliases.get(text)


Probe = Callable[[TrajectoryRecord], Label]


@dataclass(frozen=True)
class Capability:
    """A candidate capability: snake_case name, a definition precise enough to label with, and
    optionally a programmatic probe that labels one trajectory."""

    name: str
    description: str
    probe: Probe | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "description": self.description}


Key = tuple[str, str]  # (episode_id, capability name)


@dataclass
class LabelRun:
    """The labels of one independent labeling run: (episode_id, capability) -> Label.

    ``missing`` holds the pairs this run was asked about but never answered.
    """

    run: int
    labels: dict[Key, Label] = field(default_factory=dict)
    missing: set[Key] = field(default_factory=set)

    def __getitem__(self, key: Key) -> Label:
        return self.labels[key]

    def __setitem__(self, key: Key, label: Label) -> None:
        self.labels[key] = label
        self.missing.discard(key)

    def __contains__(self, key: object) -> bool:
        return key in self.labels

    def __iter__(self) -> Iterator[Key]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def get(self, key: Key) -> Label | None:
        return self.labels.get(key)

    @classmethod
    def from_mapping(cls, run: int, mapping: Mapping[Key, Label | str]) -> LabelRun:
        out = cls(run=run)
        for key, value in mapping.items():
            label = Label.parse(value)
            if label is None:
                raise ValueError(f"run {run}: {key} has no valid label: {value!r}")
            out[key] = label
        return out

    def mark_missing(self, pairs: Iterable[Key]) -> None:
        for key in pairs:
            if key not in self.labels:
                self.missing.add(key)

    def to_partition(self, success: Mapping[str, bool], capabilities: Iterable[str]) -> dict:
        """The paper's per-run output: for each capability six id lists partitioning the episodes."""
        out: dict[str, dict[str, list[str]]] = {}
        for cap in capabilities:
            lists: dict[str, list[str]] = {
                f"{lab}_{side}": [] for lab in ("lacking", "present", "na") for side in ("failed", "passed")
            }
            lists["missing"] = []
            for episode_id, ok in sorted(success.items()):
                label = self.labels.get((episode_id, cap))
                if label is None:
                    if (episode_id, cap) in self.missing:
                        lists["missing"].append(episode_id)
                    continue
                side = "passed" if ok else "failed"
                lists[f"{label.value.lower()}_{side}"].append(episode_id)
            out[cap] = lists
        return {"run": self.run, "labels": out}
