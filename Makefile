# Quick start: `make run` (set up .venv and check this machine) and `make test` (the whole suite).
# Both are idempotent: the venv is rebuilt only when pyproject.toml changes.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the tests drive for real: numactl for `nodeagent exec`, tmux for the TUI, procps;
# iproute2, iputils-ping, openssh-server/-client and iperf3 for the test cluster (network namespaces
# running sshd); shellcheck for the Slurm and launcher scripts in nodeagent/integrations.
SYSTEM_PACKAGES := procps tmux numactl iproute2 iputils-ping openssh-server openssh-client iperf3 shellcheck

.PHONY: run test test-fast lint typecheck perf fixtures system-packages clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# TensorFlow (the tf extra: tensorflow-cpu on x86_64) runs the tf.data hook and benchmark tests;
# the tui extra (Textual, pinned) the TUI's pilot and snapshot tests.
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,tf,tui]'
	touch $@

run: $(VENV)/.installed
	@# nodeagent's exit code is the worst finding (1 WARN, 2 FAIL, 3 UNKNOWN): a report, not a
	@# failure of `make run`. Usage errors (64) and crashes still fail.
	@$(BIN)/nodeagent check; rc=$$?; \
	  if [ $$rc -le 3 ]; then echo "nodeagent check exited $$rc (the worst status above)"; else exit $$rc; fi

system-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages ($(SYSTEM_PACKAGES)); tests that need them skip"; fi

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# checks/ and tuners/ install as nodeagent.checks / nodeagent.tuners (package-dir mapping), which
# mypy cannot follow through the editable-install import hook: type-check a symlinked view instead.
typecheck: $(VENV)/.installed-test
	@rm -rf build/typecheck && mkdir -p build/typecheck/nodeagent
	@for f in nodeagent/*; do ln -s "$$PWD/$$f" build/typecheck/nodeagent/; done
	@ln -s "$$PWD/checks" build/typecheck/nodeagent/checks
	@ln -s "$$PWD/tuners" build/typecheck/nodeagent/tuners
	@ln -s "$$PWD/playbooks" build/typecheck/nodeagent/playbooks
	@ln -s "$$PWD/tests" build/typecheck/tests
	cd build/typecheck && ../../$(BIN)/mypy --config-file ../../pyproject.toml nodeagent tests

test: system-packages $(VENV)/.installed-test lint typecheck
	$(BIN)/pytest -q

# The edit loop: every test but those marked slow (real sshd clusters, TensorFlow, the fuzz suite),
# stopping at the first failure; no lint, no typecheck. `make test` still runs everything.
test-fast: $(VENV)/.installed-test
	$(BIN)/pytest -q -x -m "not slow"

# The real-machine corpus as snapshot trees under build/corpus, for `nodeagent check --root
# build/corpus/NAME`: how each kind of raw recording becomes a tree is tests/corpus.py's docstring.
fixtures: $(VENV)/.installed-test
	$(BIN)/python -m tests.corpus build/corpus

perf: $(VENV)/.installed-test
	$(BIN)/python tests/perf/check_speed.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
