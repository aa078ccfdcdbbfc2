"""nodeagent: health checks and tuning for deep-learning training nodes."""

from importlib.metadata import version

# pyproject.toml's `version` is the one place the version is written; this reads it back from the
# installed package's metadata. No fallback: nodeagent runs only installed (checks/, tuners/ and
# playbooks/ become nodeagent.checks, .tuners and .playbooks through the install's package-dir
# mapping), so a missing distribution is a broken install and says so (PackageNotFoundError).
__version__ = version("nodeagent")
