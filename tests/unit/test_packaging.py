"""pyproject.toml against the source tree: the wheel lists its packages by hand (checks/, tuners/ and
playbooks/ install under nodeagent.* through package-dir, which packages.find cannot map), so a new
subpackage or data file must be listed, or the installed nodeagent breaks where the editable one
works. `make dist-check` builds the wheel and compares its files too."""

from __future__ import annotations

import importlib.metadata

import nodeagent
from tests.support import wheel_contents as wc


def test_every_package_of_the_tree_is_listed_and_every_listed_one_exists() -> None:
    config = wc.pyproject()
    listed = wc.listed_packages(config)
    assert len(listed) == len(set(listed)), "a package is listed twice"
    assert set(listed) == wc.tree_packages(config)
    for package in listed:
        assert wc.package_folder(config, package).is_dir(), package


def test_every_data_file_of_a_package_is_shipped() -> None:
    assert wc.unshipped_data(wc.pyproject()) == []


def test_the_wheel_carries_the_type_marker_the_stylesheet_schema_playbooks_and_scripts() -> None:
    expected = wc.expected_wheel_files(wc.pyproject())
    for name in (
        "nodeagent/py.typed",
        "nodeagent/tui/nodeagent.tcss",
        "nodeagent/render/report.schema.json",
        "nodeagent/playbooks/preflight.yml",
        "nodeagent/integrations/slurm-prolog.sh",
        "nodeagent/integrations/k8s-daemonset.yaml",
        "nodeagent/checks/gpu.py",
        "nodeagent/tuners/thp.py",
    ):
        assert name in expected, name


def test_the_version_is_the_one_pyproject_sets() -> None:
    version = wc.pyproject()["project"]["version"]
    assert importlib.metadata.version("nodeagent") == version
    assert nodeagent.__version__ == version
    assert "version" not in wc.pyproject()["project"].get("dynamic", [])
