# Two entry points: `make demo` and `make test`. Both bootstrap .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# The bootstrap installs uv into the venv and lets it resolve and install everything (about 30 s cold, against
# several minutes for pip); without uv (no registry for it) it falls back to pip. On machines that keep a CPU build
# of PyTorch on disk (/opt/wheels), that build is pinned, so `torch>=2.2` never pulls a multi-GB CUDA build;
# elsewhere torch resolves normally. `make demo` installs the package; `make test` adds the test extras.
LOCAL_TORCH := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))
TORCH_PIN := $(if $(LOCAL_TORCH),--find-links $(dir $(LOCAL_TORCH)) torch==2.13.0,)
TEST_ARGS ?= -n 2
PYTEST := $(PY) -m pytest
# uv writes every module's bytecode at install time: where the environment forbids writing it at run time
# (PYTHONDONTWRITEBYTECODE=1), each start would otherwise recompile torch, transformers and TransformerLens.
UV_FLAGS ?= --compile-bytecode

.PHONY: demo test test-slow bench clean-venv notebooks test-tl4

define bootstrap
	test -x $(PY) || python3 -m venv $(VENV)
	@if $(PY) -m pip install -q uv >/dev/null 2>&1; then \
		echo "installing with uv$(if $(LOCAL_TORCH), (the local CPU build of torch),)"; \
		$(VENV)/bin/uv pip install -q --python $(PY) $(UV_FLAGS) $(TORCH_PIN) -e '.$(1)'; \
	else \
		echo "uv unavailable: installing with pip"; \
		if [ -n "$(LOCAL_TORCH)" ]; then $(PY) -m pip install -q torch==2.13.0; fi; \
		$(PY) -m pip install -q -e '.$(1)'; \
	fi
endef

$(VENV)/.installed: pyproject.toml
	$(call bootstrap,)
	touch $@

$(VENV)/.installed-test: pyproject.toml
	$(call bootstrap,[test])
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) analyses/demo.py --out runs/demo --reports reports

test: $(VENV)/.installed-test
	$(PYTEST) $(TEST_ARGS) -m "not slow"

test-slow: $(VENV)/.installed-test
	$(PYTEST) $(TEST_ARGS) -m slow

# examples/*.py (percent format) are the source; their .ipynb twins are regenerated from them, outputs empty.
notebooks: $(VENV)/.installed-test
	$(PY) -m jupytext --to ipynb examples/*.py

clean-venv:
	rm -rf $(VENV) $(VENV_TL4)

# A second environment on TransformerLens 4.x (TransformerBridge) beside the default one: the backend-equivalence
# tests run there and compare every analysis number with the default environment (tests/test_backends.py).
VENV_TL4 ?= .venv-tl4
TL4_TESTS ?= tests/test_backends.py
$(VENV_TL4)/.installed: pyproject.toml
	test -x $(VENV_TL4)/bin/python || python3 -m venv $(VENV_TL4)
	$(VENV_TL4)/bin/python -m pip install -q uv
	$(VENV_TL4)/bin/uv pip install -q --python $(VENV_TL4)/bin/python $(UV_FLAGS) $(TORCH_PIN) \
		'transformer-lens>=4,<5' pytest beartype -e .
	touch $@

test-tl4: $(VENV)/.installed-test $(VENV_TL4)/.installed
	$(VENV_TL4)/bin/python -m pytest -p no:xdist -q $(TL4_TESTS)
