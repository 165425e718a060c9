"""What the app remembers between sessions: recent files, per-script run setup, layout."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from PySide6.QtCore import QSettings

from memsight.profiler.launch.spec import DEFAULT_INTERVAL_MS

MAX_RECENT = 10


@dataclass
class ScriptSetup:
    """The run setup last used for one script."""

    args: str = ""
    cwd: str = ""
    python: str = ""
    env: str = ""  # KEY=VALUE lines
    interval_ms: float = DEFAULT_INTERVAL_MS
    hooks: bool = True
    ram_budget: str = ""  # as typed, e.g. "6 GiB"; empty: none


@dataclass
class AppSettings:
    recent_scripts: list[str] = field(default_factory=list)
    recent_profiles: list[str] = field(default_factory=list)
    pythons: list[str] = field(default_factory=list)  # interpreters the user has picked
    setups: dict[str, ScriptSetup] = field(default_factory=dict)

    @classmethod
    def load(cls, store: QSettings) -> AppSettings:
        def strings(key: str) -> list[str]:
            value = _json(store.value(key, "[]"))
            return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

        setups: dict[str, ScriptSetup] = {}
        raw = _json(store.value("setups", "{}"))
        if isinstance(raw, dict):
            for script, data in raw.items():
                if isinstance(data, dict):
                    known = {k: v for k, v in data.items() if k in ScriptSetup.__dataclass_fields__}
                    try:
                        setups[script] = ScriptSetup(**known)
                    except TypeError:
                        continue
        return cls(
            strings("recent_scripts"), strings("recent_profiles"), strings("pythons"), setups
        )

    def save(self, store: QSettings) -> None:
        store.setValue("recent_scripts", json.dumps(self.recent_scripts))
        store.setValue("recent_profiles", json.dumps(self.recent_profiles))
        store.setValue("pythons", json.dumps(self.pythons))
        store.setValue("setups", json.dumps({k: asdict(v) for k, v in self.setups.items()}))
        store.sync()

    @staticmethod
    def remember(items: list[str], value: str) -> None:
        if value in items:
            items.remove(value)
        items.insert(0, value)
        del items[MAX_RECENT:]


def _json(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
