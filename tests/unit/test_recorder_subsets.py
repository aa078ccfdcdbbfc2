"""The recorder runs on nodes without json and re (their imports are start-up time on every node of
a pull): its metadata encoder, environment filter and secret test hold to what those modules say."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.host import command_name, hostname_problem
from nodeagent.host.recorder import _filter_environ, _json, _secret

# The variables the checks read, as one regular expression over NUL-separated items.
ENV_KEPT = re.compile(
    rb"(?<![^\0])"
    rb"(?:(?:OMP_|KMP_|GOMP_|TF_|MKL_|OPENBLAS_|CUDA_|NCCL_|NVIDIA_|HOROVOD_)[^\0=]*"
    rb"|LOCAL_RANK|RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|SLURM_NTASKS_PER_NODE"
    rb"|SLURM_(?:LOCALID|NTASKS|CPUS_ON_NODE|CPUS_PER_TASK|JOB_CPUS_PER_NODE)"
    rb"|OMPI_COMM_WORLD_LOCAL_(?:RANK|SIZE)|MPI_LOCALNRANKS|(?:ONEDNN|DNNL)_MAX_CPU_ISA)"
    rb"(?:=[^\0]*)?(?![^\0])"
)
NAME_PIECES = [
    b"OMP_", b"GOMP_", b"TF_", b"NCCL_", b"RANK", b"LOCAL_", b"WORLD_SIZE", b"SLURM_", b"NTASKS",
    b"MPI_LOCALNRANKS", b"DNNL_MAX_CPU_ISA", b"X", b"PATH", b"=", b"1",
]  # fmt: skip


@pytest.mark.slow
@settings(max_examples=2000)
@given(st.lists(st.lists(st.sampled_from(NAME_PIECES), max_size=4).map(b"".join), max_size=8))
def test_the_environ_filter_keeps_what_the_expression_keeps(items: list[bytes]) -> None:
    data = b"\0".join(items) + b"\0"
    kept = ENV_KEPT.findall(data)
    assert _filter_environ(data) == b"\0".join(kept) + (b"\0" if kept else b"")


@given(st.text(alphabet="aPAsSwordtokenKEYapi_-=x", max_size=12))
def test_a_secret_argument_is_what_the_expression_finds(key: str) -> None:
    secret = re.compile(r"(?i)(pass(word)?|secret|token|api[_-]?key|credential|auth)")
    assert _secret(key) == bool(secret.search(key))


# Strings as the metadata holds them (host names, paths, argv): any character but a lone surrogate.
TEXT = st.text(st.characters(exclude_categories=["Cs"]))
JSON_VALUES = st.recursive(
    TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_the_metadata_encoder_writes_json_that_reads_back(value: object) -> None:
    assert json.loads(_json(value).encode()) == value


@given(st.lists(st.text(max_size=8), min_size=1, max_size=4))
def test_a_command_name_replaces_what_is_not_a_portable_file_name_character(argv: list[str]) -> None:
    words = [re.sub(r"[^A-Za-z0-9._-]", "_", a.lstrip("-")) for a in argv]
    assert command_name(argv) == "-".join(w for w in words if w)


@given(st.text(alphabet="ab9-.é", max_size=70))
def test_a_host_name_is_accepted_as_rfc_1123_says(name: str) -> None:
    label = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
    labels = name.split(".")
    valid = 0 < len(name) <= 253 and all(label.fullmatch(part) for part in labels)
    assert (hostname_problem(name) is None) == valid
