"""One module per screen; the app imports a screen's module when its mode is first shown."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from nodeagent.tui.screen_table import SCREENS

_WHERE = {s.mode: s.where for s in SCREENS}


class _Lazy(Mapping[str, Any]):
    """Mode -> screen class, each imported when first asked for."""

    def __getitem__(self, name: str) -> Any:
        module, _, cls = _WHERE[name].partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)

    def __iter__(self) -> Any:
        return iter(_WHERE)

    def __len__(self) -> int:
        return len(_WHERE)


SCREEN_CLASSES: Mapping[str, Any] = _Lazy()
