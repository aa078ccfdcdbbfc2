"""nodeagent: health checks and tuning for deep-learning training nodes."""

from __future__ import annotations

import functools

# pyproject.toml's `version` is the one place the version is written; it is read back from the
# installed package's metadata. No fallback: nodeagent runs only installed (checks/, tuners/ and
# playbooks/ become nodeagent.checks, .tuners and .playbooks through the install's package-dir
# mapping), so a missing distribution is a broken install and says so (PackageNotFoundError).
# Read when first asked for (PEP 562): importing importlib.metadata would otherwise be most of the
# start-up of the prepared launch that starts each of verify's trials (nodeagent.tuning.prepared).
__version__: str


@functools.cache
def _version() -> str:
    # PEP 562: importlib.metadata only when __version__ is read
    from importlib.metadata import version  # noqa: PLC0415

    return version("nodeagent")


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
