# Quick start: `make run` (set up .venv and check this machine) and `make test` (the whole suite).
# Both are idempotent: the venv is rebuilt only when pyproject.toml changes.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the tests drive for real: numactl for `nodeagent exec`, tmux for the TUI, procps;
# iproute2, iputils-ping, openssh-server/-client and iperf3 for the test cluster (network namespaces
# running sshd); shellcheck for the Slurm and launcher scripts in nodeagent/integrations; Slurm
# (slurmctld, slurmd, munge) and Prometheus with node_exporter, which tests start with their own
# configuration, ports and state folders and stop again; debhelper and python3-venv for `make deb`,
# systemd for `systemd-analyze verify` of its units; mmdebstrap and umoci build the OCI image
# (`make image`), which podman runs where this machine lets it start a container (tests/integration/test_image.py).
SYSTEM_PACKAGES := procps tmux numactl iproute2 iputils-ping openssh-server openssh-client iperf3 shellcheck \
	slurm-wlm slurm-client munge prometheus prometheus-node-exporter \
	debhelper python3-venv systemd mmdebstrap umoci podman

.PHONY: run test test-ready pyz-ahead test-fast bytecode dist-check pyz deb image lint typecheck view perf fixtures docs system-packages clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# TensorFlow (the tf extra: tensorflow-cpu on x86_64) runs the tf.data hook and benchmark tests.
# Textual, which the TUI tests drive, is in the default install.
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,tf]'
	touch $@

run: $(VENV)/.installed bytecode
	@# nodeagent's exit code is the worst finding (1 WARN, 2 FAIL, 3 UNKNOWN): a report, not a
	@# failure of `make run`. Usage errors (64) and crashes still fail.
	@$(BIN)/nodeagent check; rc=$$?; \
	  if [ $$rc -le 3 ]; then echo "nodeagent check exited $$rc (the worst status above)"; else exit $$rc; fi

# Bytecode for nodeagent's own modules, written here: where PYTHONDONTWRITEBYTECODE is set (as in
# this project's CI machine) Python never writes it, so every `nodeagent` started (by a user, by the
# tests hundreds of times) compiled its modules again: 2.5 s of CPU against 0.7 s for `check
# --cluster` on the 2-CPU VM. Files whose bytecode is current are skipped.
bytecode: $(VENV)/.installed
	@$(BIN)/python -m compileall -q -j 0 nodeagent checks tuners tests

# The packages' scripts must not start their services as system daemons (Prometheus on :9090, a
# system slurmd): during the install a policy-rc.d answers 101, "action forbidden", unless the
# machine has one already (https://people.debian.org/~hmh/invokerc.d-policyrc.d-specification.txt).
system-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    policy=/usr/sbin/policy-rc.d; made=; \
	    if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' > $$policy && chmod 755 $$policy && made=1; fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	    rc=$$?; [ -z "$$made" ] || rm -f $$policy; [ $$rc = 0 ] || exit $$rc; \
	  fi; \
	else echo "not root: skipping Debian packages ($(SYSTEM_PACKAGES)); tests that need them skip"; fi

# The installed layout as symlinks: checks/ and tuners/ install as nodeagent.checks / nodeagent.tuners
# (package-dir mapping), which mypy and import-linter cannot follow through the editable-install
# import hook. Both read this view instead.
VIEW := build/view
view: $(VENV)/.installed-test
	@rm -rf $(VIEW) && mkdir -p $(VIEW)/nodeagent
	@for f in nodeagent/*; do ln -s "$$PWD/$$f" $(VIEW)/nodeagent/; done
	@ln -s "$$PWD/checks" $(VIEW)/nodeagent/checks
	@ln -s "$$PWD/tuners" $(VIEW)/nodeagent/tuners
	@ln -s "$$PWD/playbooks" $(VIEW)/nodeagent/playbooks
	@ln -s "$$PWD/tests" $(VIEW)/tests

# ruff, then the layer rules of [tool.importlinter] in pyproject.toml (faces print; no cycles).
lint: view
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd $(VIEW) && PYTHONPATH="$$PWD" ../../$(BIN)/lint-imports ../../pyproject.toml

typecheck: view
	cd $(VIEW) && ../../$(BIN)/mypy --config-file ../../pyproject.toml nodeagent tests ../../build-aux/pyz_preamble.py

# pytest-xdist: tests run on as many workers as there are CPUs (PYTEST_WORKERS=0: one process).
# What two workers must not share (state folders, tmux sessions, SSH clusters' namespaces) is unique
# per test or per process; tests that cannot be, and modules whose module fixtures are too costly to
# build on every worker, carry an xdist_group, which loadgroup keeps on one worker (tests/conftest.py).
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadgroup

# Tests marked solo measure a speed-up on this machine (A/B trials of real TensorFlow): another
# test on the other CPU would be what they measure; or they switch a machine-wide value (this
# machine's THP) that a live check beside them would read. They run after the others, one at a time.
test: system-packages
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-ready
	$(BIN)/pytest -q -m "not solo" --durations=30 $(PYTEST_PARALLEL)
	$(BIN)/pytest -q -m solo --durations=10

# What the suite needs before it starts, two at a time: build/nodeagent.pyz (a minute: its own build
# venv and the system's python3, wheels from PyPI) is built beside the test venv's install, lint and
# typecheck, which leave a CPU idle, instead of inside the suite, where it held one of the two CPUs
# for 100 s. Built ahead only to save that time: where it fails here, tests/integration/test_pyz.py
# runs `make pyz` again and fails saying why (or skips, when PyPI cannot be reached).
test-ready: $(VENV)/.installed-test bytecode lint typecheck pyz-ahead

pyz-ahead:
	@$(MAKE) --no-print-directory pyz || echo "pyz: not built ahead of the tests (above); tests/integration/test_pyz.py builds it again and says why"

# The edit loop: tests/unit but the tests marked slow (the fuzz suite, running the documentation's
# command blocks, the property and error-rate tests of thousands of examples), stopping at the
# first failure; no lint, no typecheck, nothing from
# tests/integration (real sshd clusters, Slurm, Prometheus, TensorFlow, tmux). `make test` still
# runs everything.
test-fast: $(VENV)/.installed-test bytecode
	$(BIN)/pytest -q -x -m "not slow" $(PYTEST_PARALLEL) tests/unit

# The package as users get it: `python -m build` makes the sdist and, from it, the wheel; the wheel
# must hold every package and data file of the tree (tests/support/wheel_contents.py); installed alone in a
# clean venv, it must answer --version, check a recorded node (exit 0-3 is the worst status found,
# a report; anything else fails) and start the TUI headless (tests/support/tui_smoke.py, run by that venv's
# python so it imports the installed package, not this tree).
DIST := build/dist
DIST_VENV := build/dist-venv
DIST_ROOT := tests/fixtures/hwloc/40intel64-2g2n4c+pcilocality.tar.bz2
dist-check: $(VENV)/.installed-test
	rm -rf $(DIST) $(DIST_VENV)
	$(BIN)/python -m build --outdir $(DIST) .
	$(BIN)/python -m tests.support.wheel_contents $(DIST)
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/pip install --quiet $(DIST)/nodeagent-*.whl
	$(DIST_VENV)/bin/nodeagent --version
	@rc=0; $(DIST_VENV)/bin/nodeagent check --root $(DIST_ROOT) || rc=$$?; \
	  if [ $$rc -gt 3 ]; then echo "dist-check: nodeagent check --root $(DIST_ROOT) failed (exit $$rc)"; exit 1; fi; \
	  echo "dist-check: nodeagent check --root $(DIST_ROOT) exited $$rc (the worst status above)"
	$(DIST_VENV)/bin/python tests/support/tui_smoke.py $(DIST_ROOT)

# nodeagent as one file for nodes where it is not installed: `python3 nodeagent.pyz check`, or
# `./nodeagent.pyz check` (#!/usr/bin/env python3). pex rather than shiv: one pex holds the compiled
# wheels (pydantic-core, PyYAML, cffi, wrapt; cryptography, bcrypt, PyNaCl and psutil as abi3) of
# several interpreters and machines and picks the matching ones at start-up; shiv packs those of the
# interpreter that builds it. Served: CPython 3.10-3.14 on Linux x86_64 and aarch64 with glibc >= 2.17
# (manylinux2014: https://peps.python.org/pep-0599/); the patch versions give pex the
# python_full_version that some markers read. Not in it: TensorFlow (the tf extra).
# The first run of a build unpacks every wheel into $PEX_ROOT (default ~/.cache/pex, the user's own;
# HOME unset: the passwd entry's home; unusable: a private temporary folder, removed at exit) and
# makes a venv there, so the `python -m nodeagent` of its child processes finds nodeagent too.
# build-aux/pyz_preamble.py runs before pex's bootstrap: it moves an unusable $PEX_ROOT (read-only,
# noexec) to a private temporary folder, and a start that fails exits 69, 70 or 74 with one line,
# never 1 (check's WARN); pex's own warnings, noise on a node, show only with PEX_VERBOSE. It also
# answers `nodeagent.pyz install DIR` (unpacked once, into a venv: DIR/bin/nodeagent), and with
# NODEAGENT_NO_UNPACK=1 (the Slurm scripts: a prolog has 9 s) a build not unpacked yet unpacks in
# the background and the run exits 75 at once.
# The same tree gives the same file: the tools are pinned in build-aux/pyz-requirements.txt (own venv,
# build/pyz-venv), PyPI is read as it was at PYZ_INDEX_DATE (a newer minimum in pyproject.toml needs a
# later date) and SOURCE_DATE_EPOCH fixes the wheel's file times
# (https://reproducible-builds.org/specs/source-date-epoch/). Rebuilt only when a source is newer
# than the file (which carries the time its build started); one build at a time.
pyz: PYZ_INDEX_DATE := 2026-11-25T00:00:00Z
# The wheel is built from a copy of what it is made of: a build in the tree writes
# nodeagent.egg-info and build/lib there, as `pip install -e .` (beside which `make test` builds the
# pyz) and `make deb` do at the same time.
PYZ_WHEEL_SOURCES := pyproject.toml README.md LICENSE nodeagent checks tuners playbooks
# pex's cache of downloads and built wheels, the user's own as pex's default root is, so that every
# clone on the machine reuses it (pex writes it atomically; the file does not depend on it).
PYZ_CACHE ?= $(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME),$(if $(HOME),$(HOME)/.cache,build))/nodeagent/pyz-build
pyz: PYZ_PLATFORMS := $(foreach m,x86_64 aarch64,$(foreach v,3.10.12 3.11.2 3.12.3 3.13.5 3.14.0,\
	--platform manylinux2014_$(m)-cp-$(v)-cp$(subst .,,$(basename $(v)))))
pyz:
	@mkdir -p build && exec 9>build/.pyz.lock && flock 9 && \
	pyz=build/nodeagent.pyz venv=build/pyz-venv reqs=build-aux/pyz-requirements.txt; \
	sources="nodeagent checks tuners playbooks pyproject.toml Makefile build-aux"; \
	if [ -f $$pyz ] && [ -z "$$(find $$sources -type f ! -name '*.pyc' -newer $$pyz -print -quit)" ]; then \
	  echo "$$pyz is up to date"; exit 0; \
	fi; \
	step() { echo "pyz: $$1 ($$SECONDS s)"; }; \
	if [ ! $$reqs -ot $$venv/.installed ]; then \
	  step "1/3 the build tools into $$venv, from $$reqs"; \
	  rm -rf $$venv && $(PYTHON) -m venv $$venv && $$venv/bin/pip install --quiet -r $$reqs && \
	  touch $$venv/.installed || exit 1; \
	else step "1/3 the build tools: $$venv reused"; fi; \
	touch build/.pyz.started && rm -rf build/pyz-dist build/pyz-tmp && mkdir build/pyz-tmp; \
	step "2/3 the wheel (python -m build, log build/pyz-tmp/wheel.log)"; \
	mkdir build/pyz-tmp/src && tar -cf - --exclude=__pycache__ $(PYZ_WHEEL_SOURCES) | tar -xf - -C build/pyz-tmp/src && \
	SOURCE_DATE_EPOCH=315532800 $$venv/bin/python -m build --outdir "$$PWD/build/pyz-dist" build/pyz-tmp/src \
	  >build/pyz-tmp/wheel.log 2>&1 || { tail -30 build/pyz-tmp/wheel.log; exit 1; }; \
	step "3/3 pex: the wheels of 10 interpreter-machine pairs from PyPI as of $(PYZ_INDEX_DATE)$$(\
	  [ -d $(PYZ_CACHE) ] && echo ", $(PYZ_CACHE) reused" || echo " (an empty cache: about 2 min)")"; \
	( while sleep 20; do \
	    echo "pyz:   pex still resolving ($$SECONDS s, $$(find $(PYZ_CACHE) -name '*.whl' 2>/dev/null | wc -l) wheels in $(PYZ_CACHE))"; \
	  done ) & ticker=$$!; \
	$$venv/bin/pex build/pyz-dist/nodeagent-*.whl $(PYZ_PLATFORMS) \
	  --pip-version 26.2.1 --uploaded-prior-to $(PYZ_INDEX_DATE) \
	  --console-script nodeagent --venv --python-shebang '/usr/bin/env python3' \
	  --preamble-file build-aux/pyz_preamble.py --no-emit-warnings \
	  --pex-root $(PYZ_CACHE) --tmpdir build/pyz-tmp -o $$pyz.part; made=$$?; \
	kill $$ticker 2>/dev/null; wait $$ticker 2>/dev/null; [ $$made = 0 ] || exit 1; \
	mv $$pyz.part $$pyz && touch -r build/.pyz.started $$pyz; \
	rm -rf build/pyz-tmp build/pyz-dist build/.pyz.started; \
	echo "built $$pyz: $$(du -m $$pyz | cut -f1) MB in $$SECONDS s"

# The version of pyproject.toml (the one place it is set), for the package and the image's tag.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)

# nodeagent as a Debian package, build/deb/nodeagent_VERSION_ARCH.deb: the wheel of this tree, and
# packaging/debian (debhelper; what goes where and why is in its rules and maintainer scripts), built
# with dpkg-buildpackage in a copy under build/deb/src (it writes its results to the folder above
# the source). The changelog entry is made here from pyproject.toml's version, so the two never
# disagree. Needs debhelper and python3-venv (`make system-packages`) and PyPI for the dependencies.
DEB := build/deb
deb: $(VENV)/.installed
	@rm -rf $(DEB) && mkdir -p $(DEB)/src && \
	version=$(VERSION) && \
	echo "building $(DEB)/nodeagent_$${version}: the wheel, a venv of it and its dependencies from PyPI, dpkg-buildpackage" && \
	$(BIN)/pip wheel --quiet --no-deps --disable-pip-version-check --wheel-dir $(DEB)/src/wheel . && \
	cp -r packaging/debian $(DEB)/src/debian && \
	printf 'nodeagent (%s) unstable; urgency=medium\n\n  * Built from the repository by make deb.\n\n -- %s  %s\n' \
	  "$$version" "nodeagent maintainers <nodeagent@localhost>" "$$(date -R -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)})" \
	  > $(DEB)/src/debian/changelog && \
	(cd $(DEB)/src && dpkg-buildpackage --build=binary --unsigned-source --unsigned-changes >../build.log 2>&1) \
	  || { tail -40 $(DEB)/build.log; exit 1; }; \
	echo "built $$(ls $(DEB)/*.deb) ($$(du -m $(DEB)/*.deb | cut -f1) MB) in $$SECONDS s"

# nodeagent as an OCI image, built without a container daemon from Debian's packages (mmdebstrap,
# umoci): build/image/nodeagent-VERSION.oci.tar, tagged with VERSION, which the Kubernetes manifests
# name. How: build-aux/image.sh. Root only.
image: $(VENV)/.installed
	@build-aux/image.sh $(VERSION) $(BIN)/python

# The real-machine corpus as snapshot trees under build/corpus, for `nodeagent check --root
# build/corpus/NAME`: how each kind of raw recording becomes a tree is tests/support/corpus.py's docstring.
fixtures: $(VENV)/.installed-test
	$(BIN)/python -m tests.support.corpus build/corpus

# docs/checks.md's table of checks, between its checks-table markers, rewritten from the registry
# (`nodeagent checks --format markdown`); tests/unit/test_docs_checks_table.py fails while it differs.
docs: $(VENV)/.installed
	$(BIN)/python -m tests.support.docs_table docs/checks.md

perf: $(VENV)/.installed-test
	$(BIN)/python tests/perf/check_speed.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
