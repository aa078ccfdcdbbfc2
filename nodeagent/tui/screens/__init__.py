"""One module per screen; the app imports a screen's module when its mode is first shown."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

# mode name -> "module:Class" under nodeagent.tui.screens
_WHERE = {
    "overview": "overview:OverviewScreen",
    "checks": "checks:ChecksScreen",
    "topology": "topology:TopologyScreen",
    "tune": "tune:TuneScreen",
    "bench": "bench:BenchScreen",
    "cluster": "cluster:ClusterScreen",
}


class _Lazy(Mapping[str, Any]):
    def __getitem__(self, name: str) -> Any:
        module, _, cls = _WHERE[name].partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)

    def __iter__(self) -> Any:
        return iter(_WHERE)

    def __len__(self) -> int:
        return len(_WHERE)


SCREEN_CLASSES: Mapping[str, Any] = _Lazy()
