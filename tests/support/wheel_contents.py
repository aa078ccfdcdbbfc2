"""What the wheel must hold, read from the source tree and pyproject.toml, and what a built wheel
holds: the packages pyproject lists against the folders that hold Python code, and every file a
wheel must carry (each package's modules and the package data its patterns ship).

tests/unit/test_packaging.py holds pyproject's lists to the tree; `make dist-check` runs this module on
the wheel it built:  python tests/support/wheel_contents.py DIST_FOLDER
"""

from __future__ import annotations

import fnmatch
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, which `build` (the test extra) installs there
    import tomli as tomllib

# Files in a package folder that are not for the wheel, with the reason.
NOT_SHIPPED = {
    "playbooks/README.md": "documentation of the playbook format, read in the repository",
}


def pyproject() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as f:
        config: dict[str, Any] = tomllib.load(f)
    return config


def version() -> str:
    """nodeagent's version, as pyproject.toml sets it (the package's, the image's tag)."""
    value = pyproject()["project"]["version"]
    assert isinstance(value, str)
    return value


def setuptools_config(config: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = config["tool"]["setuptools"]
    return tool


def listed_packages(config: dict[str, Any]) -> list[str]:
    packages: list[str] = setuptools_config(config)["packages"]
    return packages


def package_folder(config: dict[str, Any], package: str) -> Path:
    """Where a package's files are in the source tree: its package-dir entry, else its dotted path."""
    mapped: dict[str, str] = setuptools_config(config).get("package-dir", {})
    return REPO / mapped.get(package, package.replace(".", "/"))


def _source_files(folder: Path) -> Iterable[Path]:
    """The files directly in a package folder (subfolders are packages of their own)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix not in (".pyc", ".pyo"))


def tree_packages(config: dict[str, Any]) -> set[str]:
    """Every folder below nodeagent/ that holds Python code, as a dotted name, and the folders that
    package-dir installs under other names (checks/, tuners/, playbooks/)."""
    found = {"nodeagent"}
    for init in (REPO / "nodeagent").rglob("*.py"):
        folder = init.parent
        if "__pycache__" not in folder.parts:
            found.add(".".join(folder.relative_to(REPO).parts))
    found.update(setuptools_config(config).get("package-dir", {}))
    return found


def shipped_files(config: dict[str, Any], package: str) -> tuple[list[Path], list[Path]]:
    """A listed package's files in the tree, as (shipped, left out): modules and the files its
    package-data patterns match are shipped."""
    patterns: list[str] = setuptools_config(config).get("package-data", {}).get(package, [])
    shipped: list[Path] = []
    left_out: list[Path] = []
    for path in _source_files(package_folder(config, package)):
        matched = path.suffix == ".py" or any(fnmatch.fnmatch(path.name, g) for g in patterns)
        (shipped if matched else left_out).append(path)
    return shipped, left_out


def unshipped_data(config: dict[str, Any]) -> list[str]:
    """Files of listed packages that no package-data pattern ships and NOT_SHIPPED does not explain:
    what a wheel would silently leave out."""
    return [
        rel
        for package in listed_packages(config)
        for rel in (p.relative_to(REPO).as_posix() for p in shipped_files(config, package)[1])
        if rel not in NOT_SHIPPED
    ]


def expected_wheel_files(config: dict[str, Any]) -> set[str]:
    """The paths every wheel must hold: each listed package's modules and its package data."""
    return {
        f"{package.replace('.', '/')}/{path.name}"
        for package in listed_packages(config)
        for path in shipped_files(config, package)[0]
    }


def wheel_files(wheel: Path) -> set[str]:
    """The files of a wheel, without its .dist-info metadata."""
    with zipfile.ZipFile(wheel) as z:
        return {
            n for n in z.namelist() if not n.split("/", 1)[0].endswith(".dist-info") and not n.endswith("/")
        }


def wheel_version(wheel: Path) -> str | None:
    with zipfile.ZipFile(wheel) as z:
        (metadata,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        for line in z.read(metadata).decode().splitlines():
            if line.startswith("Version: "):
                return line.removeprefix("Version: ")
    return None


def check_wheel(wheel: Path) -> list[str]:
    """What is wrong with a built wheel, one line each; empty when it holds exactly the tree."""
    config = pyproject()
    problems = []
    have, want = wheel_files(wheel), expected_wheel_files(config)
    problems += [
        f"{wheel.name}: {name} is missing (it is in the source tree)" for name in sorted(want - have)
    ]
    problems += [f"{wheel.name}: {name} is not in the source tree" for name in sorted(have - want)]
    version = config["project"]["version"]
    if wheel_version(wheel) != version:
        problems.append(f"{wheel.name}: metadata version {wheel_version(wheel)}, pyproject says {version}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    wheels = sorted(Path(argv[1]).glob("nodeagent-*.whl"))
    if len(wheels) != 1:
        print(
            f"wheel_contents: expected one nodeagent wheel in {argv[1]}, found {len(wheels)}", file=sys.stderr
        )
        return 1
    problems = check_wheel(wheels[0])
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return 1
    print(f"{wheels[0].name}: {len(wheel_files(wheels[0]))} files, exactly the packages and data of the tree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
