"""The version of the report document's contract (nodeagent.api.report), apart from the models so
that every command stamping its JSON with it (nodeagent.render.jsonout: `facts`, `tune` too) does
not have to build them. Bumped on any incompatible change of the documents."""

SCHEMA_VERSION = 1
