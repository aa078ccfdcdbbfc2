"""JSON documents nodeagent prints. `schema` is bumped on any incompatible change."""

from __future__ import annotations

import json
from typing import Any

from nodeagent import __version__
from nodeagent.engine import Report

SCHEMA_VERSION = 1


def document(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with the schema version and nodeagent's version first (nodeagent/render/report.schema.json)."""
    return {"schema": SCHEMA_VERSION, "nodeagent": __version__, **doc}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc if "schema" in doc else document(doc), indent=2, default=str)


def report(r: Report) -> str:
    return dumps(r.to_dict())
