# The README's commands: `make run` (the main job) and `make test` (the whole suite).
# Both go through `make install`, which builds .venv/ in this checkout.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUN_DIR := .fluksio-run

.PHONY: install run test test-fast lint typecheck clean slurm-up slurm-down slurm-for-tests \
	gridengine-up gridengine-down gridengine-for-tests browser-for-tests nginx-for-tests \
	prometheus-for-tests containers-for-tests postgres-up postgres-down postgres-for-tests

install: $(STAMP)

# Reinstalls only when the packaging changes; the installs are editable, so source edits
# need nothing. Both distributions go in one pip call so the engine's pin on
# fluksio-worker==0.2.0 is met by this checkout, never by PyPI.
# The plugins (the example and Grid Engine) are installed like any third party's, so the
# tests discover them by their entry points.
$(STAMP): pyproject.toml packaging/fluksio-worker/pyproject.toml plugins/local/pyproject.toml \
		plugins/gridengine/pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./packaging/fluksio-worker -e '.[dev]' -e ./plugins/local \
		-e ./plugins/gridengine
	touch $(STAMP)

run: install
	bash examples/run-demo.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy fluksio tests bench plugins/local/fluksio_local plugins/gridengine/fluksio_gridengine

test: install lint typecheck slurm-for-tests gridengine-for-tests browser-for-tests nginx-for-tests prometheus-for-tests \
		containers-for-tests postgres-for-tests
	$(BIN)/python -m pytest -n 3 --dist loadgroup --durations=25

# The engine's logic in about a minute: lint, types and every unmarked test, in the test's
# process; not those marked contract (real Slurm, sshd, Chromium, nginx, Prometheus, a
# real-length timeline), process (real engine and agent processes) or slow (wheels).
test-fast: install lint typecheck
	FLUKSIO_TESTS=fast $(BIN)/python -m pytest -q -n 3 --dist loadgroup -m "not contract and not process and not slow"

# Debian's Chromium for the Workers screen's tests (Playwright drives it; it never downloads
# a browser). Like Slurm: installed as root, else those tests skip, and fail under CI=true.
browser-for-tests:
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then bash scripts/apt-install.sh chromium \
		&& echo "installed chromium for the browser tests"; \
	else echo "no chromium and not root: the browser tests will skip (and fail under CI=true)"; fi

# Debian's nginx for the reverse-proxy test (docs/deploying.md's configuration). The test
# runs its own nginx from a directory of its own; no service is started here.
nginx-for-tests:
	@if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then bash scripts/apt-install.sh nginx-light \
		&& echo "installed nginx-light for the deployment test"; \
	else echo "no nginx and not root: the deployment test will skip (and fail under CI=true)"; fi

# Debian's Prometheus for the metrics test: the test runs its own server, on its own port,
# from a directory of its own; the package's service is never started.
prometheus-for-tests:
	@if command -v prometheus >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then bash scripts/apt-install.sh prometheus \
		&& echo "installed prometheus for the metrics test"; \
	else echo "no prometheus and not root: the scrape test will skip (and fail under CI=true)"; fi

# Podman and two images with only Debian's python3 in them, for calls in containers
# (scripts/container-images.sh). As root, else those tests skip (and fail under CI=true).
containers-for-tests:
	@if [ "$$(id -u)" = 0 ]; then bash scripts/container-images.sh >/dev/null; \
	else echo "not root: the container tests will skip (and fail under CI=true)"; fi

# A single-node Slurm and an SSH login node on 127.0.0.1 (see scripts/slurm-up.sh).
slurm-up:
	bash scripts/slurm-up.sh

slurm-down:
	bash scripts/slurm-down.sh

# A PostgreSQL cluster of its own on 127.0.0.1:55432 (Debian's postgresql), for an engine
# on PostgreSQL (issue 67, under way; the schema's test uses it): its URL and password
# file are in /var/lib/fluksio-postgres/env. Run as root.
postgres-up:
	bash scripts/postgres-up.sh

postgres-down:
	bash scripts/postgres-down.sh

# Like Slurm: set up as root, else the PostgreSQL tests skip, and fail under CI=true.
postgres-for-tests:
	@if [ "$$(id -u)" = 0 ]; then bash scripts/postgres-up.sh >/dev/null; \
	else echo "not root: the PostgreSQL tests will skip (and fail under CI=true)"; fi

# The Slurm tests need root to set the cluster up; on a laptop without it they skip, and
# under CI=true they fail, so CI can never pass without them.
slurm-for-tests:
	@if [ "$$(id -u)" = 0 ]; then bash scripts/slurm-up.sh >/dev/null; \
	else echo "not root: the Slurm tests will skip (and fail under CI=true)"; fi

# A one-host Grid Engine cell for the Grid Engine plugin's tests (scripts/gridengine-up.sh);
# its jobs are submitted through slurm-up's login node, so that comes first.
gridengine-up: slurm-up
	bash scripts/gridengine-up.sh

gridengine-down:
	bash scripts/gridengine-down.sh

gridengine-for-tests: slurm-for-tests
	@if [ "$$(id -u)" = 0 ]; then bash scripts/gridengine-up.sh >/dev/null; \
	else echo "not root: the Grid Engine tests will skip (and fail under CI=true)"; fi

clean:
	rm -rf $(VENV) $(RUN_DIR) build *.egg-info packaging/fluksio-worker/build packaging/fluksio-worker/*.egg-info \
		plugins/local/build plugins/local/*.egg-info plugins/gridengine/build \
		plugins/gridengine/*.egg-info
