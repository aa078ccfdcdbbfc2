"""The run_cli fixture (tests/support/cli.py): the same answer in this process as from a process of
its own, and nothing of one run left behind for the next."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import RunCli, environment
from tests.support.paths import VM

CHECK = ("check", "--root", str(VM), "--only", "numa,kernel", "--format", "json")


def test_in_process_and_as_a_process_answer_alike(run_cli: RunCli) -> None:
    here, there = run_cli(*CHECK), run_cli(*CHECK, process=True)
    assert here.returncode == there.returncode and here.stderr == there.stderr == ""
    assert [f["subject"] for f in here.json()["findings"]] == [f["subject"] for f in there.json()["findings"]]


def test_a_usage_error_is_its_exit_code_and_one_line(run_cli: RunCli) -> None:
    code, out, err = run_cli("check", "--only", "no-such-check")
    assert code == 64 and out == "" and err.count("\n") == 1


def test_the_environment_and_folder_of_a_run_are_its_own(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODEAGENT_TEST_KEPT", "before")
    monkeypatch.delenv("NODEAGENT_TEST_NEW", raising=False)
    before = Path.cwd()
    out = tmp_path / "baseline.json"
    code, _, err = run_cli(
        "baseline", "save", out.name, "--root", str(VM),
        env={"NODEAGENT_TEST_KEPT": None, "NODEAGENT_TEST_NEW": "x"}, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert out.is_file()  # written in the run's folder
    assert Path.cwd() == before
    assert os.environ["NODEAGENT_TEST_KEPT"] == "before" and "NODEAGENT_TEST_NEW" not in os.environ


def test_a_process_is_given_the_variables_set_and_not_those_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_TEST_GONE", "1")
    monkeypatch.setenv("NODEAGENT_TEST_KEPT", "1")
    env = environment({"NODEAGENT_TEST_GONE": None, "NODEAGENT_TEST_SET": "2"})
    assert "NODEAGENT_TEST_GONE" not in env
    assert env["NODEAGENT_TEST_SET"] == "2" and env["NODEAGENT_TEST_KEPT"] == "1"
    assert os.environ["NODEAGENT_TEST_GONE"] == "1"  # this process's own is left as it was
