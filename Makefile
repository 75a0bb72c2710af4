# Two entry points: `make demo` and `make test`. Both bootstrap .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# On machines that keep a CPU build of PyTorch on disk (pip's find-links), install that first so the
# `torch>=2.2` requirement is already met; elsewhere pip resolves torch normally.
LOCAL_TORCH := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))
TEST_ARGS ?= -n 2
PYTEST := $(PY) -m pytest

.PHONY: demo test test-slow bench clean-venv notebooks

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	@if [ -n "$(LOCAL_TORCH)" ]; then echo "using the local CPU build of torch"; \
		$(PY) -m pip install -q torch==2.13.0; fi
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) analyses/demo.py --out runs/demo --reports reports

test: $(VENV)/.installed
	$(PYTEST) $(TEST_ARGS) -m "not slow"

test-slow: $(VENV)/.installed
	$(PYTEST) $(TEST_ARGS) -m slow

# examples/*.py (percent format) are the source; their .ipynb twins are regenerated from them, outputs empty.
notebooks: $(VENV)/.installed
	$(PY) -m jupytext --to ipynb examples/*.py

clean-venv:
	rm -rf $(VENV)
