# Two entry points: `make demo` and `make test`. Both bootstrap .venv on first use.
# Every path is taken from the repository root (this file's folder), so `make -C REPO test` and
# `make -f REPO/Makefile test` behave the same from any working directory.
ROOT := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
VENV ?= $(ROOT)/.venv
PY := $(VENV)/bin/python
# The bootstrap installs uv into the venv and lets it resolve and install everything (about 30 s cold, against
# several minutes for pip); without uv (no registry for it) it falls back to pip. On machines that keep a CPU build
# of PyTorch on disk (/opt/wheels), that build is pinned, so `torch>=2.2` never pulls a multi-GB CUDA build;
# elsewhere torch resolves normally. `make demo` installs the package; `make test` adds the test extras.
LOCAL_TORCH := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))
TORCH_PIN := $(if $(LOCAL_TORCH),--find-links $(dir $(LOCAL_TORCH)) torch==2.13.0,)
TEST_ARGS ?= -n 2
# The folder pytest runs in; no test may depend on it (.ci/run sets a scratch folder to prove it).
TEST_CWD ?= $(ROOT)
PYTEST := $(PY) -m pytest
# uv writes every module's bytecode at install time: where the environment forbids writing it at run time
# (PYTHONDONTWRITEBYTECODE=1), each start would otherwise recompile torch, transformers and TransformerLens.
UV_FLAGS ?= --compile-bytecode

.PHONY: demo install venv lint test test-unit test-subprocess test-slow test-wheel bench clean-venv notebooks test-tl3 docs

# The default environment takes whatever `transformer-lens>=3.9` resolves to (4.x today: TransformerBridge); the
# whole suite runs there. `make test-tl3` checks the other major version (3.9, HookedTransformer) beside it.
TL_DEFAULT ?= transformer-lens>=3.9

define bootstrap
	test -x $(PY) || python3 -m venv $(VENV)
	@if $(PY) -m pip install -q uv >/dev/null 2>&1; then \
		echo "installing with uv$(if $(LOCAL_TORCH), (the local CPU build of torch),)"; \
		$(VENV)/bin/uv pip install -q --python $(PY) $(UV_FLAGS) $(TORCH_PIN) '$(TL_DEFAULT)' -e '$(ROOT)$(1)' \
			-e '$(ROOT)/papers'; \
	else \
		echo "uv unavailable: installing with pip"; \
		if [ -n "$(LOCAL_TORCH)" ]; then $(PY) -m pip install -q torch==2.13.0; fi; \
		$(PY) -m pip install -q '$(TL_DEFAULT)' -e '$(ROOT)$(1)' -e '$(ROOT)/papers'; \
	fi
endef

$(VENV)/.installed: $(ROOT)/pyproject.toml $(ROOT)/papers/pyproject.toml
	$(call bootstrap,)
	touch $@

$(VENV)/.installed-test: $(ROOT)/pyproject.toml $(ROOT)/papers/pyproject.toml
	$(call bootstrap,[test])
	touch $@ $(VENV)/.installed

# `make install` (or `make venv`): .venv with mechmem and the reproductions (papers/, the plugin package
# mechmem_papers) installed editable, and the `mechmem` command in .venv/bin.
install venv: $(VENV)/.installed

demo: $(VENV)/.installed
	cd $(ROOT) && $(PY) analyses/demo.py --out runs/demo --reports reports

# Formatting and lint (line length and rules in pyproject.toml's [tool.ruff]); `make test` runs them first.
lint: $(VENV)/.installed-test
	cd $(ROOT) && $(VENV)/bin/ruff format --check . && $(VENV)/bin/ruff check .

test: lint
	cd $(TEST_CWD) && $(PYTEST) $(TEST_ARGS) -m "not slow and not wheel" $(ROOT)/tests

# The default run split in two: the in-process tests, and those that start a child Python process (marked
# `subprocess`; `make test` runs both).
test-unit: $(VENV)/.installed-test
	cd $(TEST_CWD) && $(PYTEST) $(TEST_ARGS) -m "not slow and not wheel and not subprocess" $(ROOT)/tests

test-subprocess: $(VENV)/.installed-test
	cd $(TEST_CWD) && $(PYTEST) $(TEST_ARGS) -m "subprocess and not slow and not wheel" $(ROOT)/tests

# The wheel of this checkout installed into a fresh venv outside the repository (not editable) and used from an
# empty folder: `mechmem --help`, a training run, `mechmem analyse`, the README snippet, every example.
test-wheel: $(VENV)/.installed-test
	cd $(TEST_CWD) && $(PYTEST) -m wheel $(ROOT)/tests/test_wheel.py

test-slow: $(VENV)/.installed-test
	cd $(TEST_CWD) && $(PYTEST) $(TEST_ARGS) -m "slow and not wheel" $(ROOT)/tests

# The API reference, generated offline from the docstrings by pdoc into build/docs (open build/docs/index.html):
# the package's public surface (`mechmem.__all__`) and its main subpackages, each as far as its own `__all__`
# reaches (the papers' internals and the command line are left out). This checkout's src/ comes first on the path.
# Every warning is an error, pdoc's own included (an unparsable annotation, a module that fails to import); only
# DeprecationWarnings raised inside torch, transformers or TransformerLens are ignored.
DOCS_OUT ?= $(ROOT)/build/docs
DOCS_MODULES ?= mechmem mechmem.analysis mechmem.checkpoint mechmem.models mechmem.report mechmem.tasks \
	mechmem.training mechmem.plugins
define PDOC_MAIN
import sys, warnings
warnings.simplefilter("error")
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(torch|transformers|transformer_lens)(\.|$$)")
import mechmem, mechmem.training  # pdoc reads a module's __dict__: resolve the names imported on first use
[getattr(module, name) for module in (mechmem, mechmem.training) for name in module.__all__]
from pdoc.__main__ import cli
sys.argv[0] = "pdoc"
cli()
endef
export PDOC_MAIN

docs: $(VENV)/.installed-test
	rm -rf $(DOCS_OUT)
	cd $(ROOT) && PYTHONPATH=$(ROOT)/src $(PY) -c "$$PDOC_MAIN" --docformat google --output-directory $(DOCS_OUT) \
		$(DOCS_MODULES)
	@echo "wrote $(DOCS_OUT)/index.html"

# examples/*.py (percent format) are the source; their .ipynb twins are regenerated from them, outputs empty.
notebooks: $(VENV)/.installed-test
	cd $(ROOT) && $(PY) -m jupytext --to ipynb examples/*.py

clean-venv:
	rm -rf $(VENV) $(VENV_TL3)

# A second environment on TransformerLens 3.9 (HookedTransformer) beside the default one: the backend-equivalence
# tests (every analysis number compared with the default environment, tests/test_backends.py) and the analysis
# tests run there, the checkpoint fixtures of every format, and the third round of bad inputs (the Hugging Face
# cases differ by backend).
VENV_TL3 ?= $(ROOT)/.venv-tl3
TL3_TESTS ?= $(addprefix $(ROOT)/tests/,test_backends.py test_checkpoint.py test_interventions.py test_patching.py \
	test_attribution.py test_circuits.py test_heads.py test_ablation.py test_logit_lens.py test_neurons.py \
	test_probes.py test_roles.py test_dynamics.py test_circuit_report.py test_patching_architectures.py test_byom.py \
	test_qk_correction.py test_bad_inputs_faults.py test_attention_z.py test_qk.py test_composition.py \
	test_circuit_robust.py test_train_interventions.py test_progress_measures.py test_tokens.py test_limits.py test_api_inputs.py)
$(VENV_TL3)/.installed: $(ROOT)/pyproject.toml $(ROOT)/papers/pyproject.toml
	test -x $(VENV_TL3)/bin/python || python3 -m venv $(VENV_TL3)
	$(VENV_TL3)/bin/python -m pip install -q uv
	$(VENV_TL3)/bin/uv pip install -q --python $(VENV_TL3)/bin/python $(UV_FLAGS) $(TORCH_PIN) \
		'transformer-lens>=3.9,<4' -e '$(ROOT)[test]' -e '$(ROOT)/papers'
	touch $@

test-tl3: $(VENV)/.installed-test $(VENV_TL3)/.installed
	cd $(TEST_CWD) && $(VENV_TL3)/bin/python -m pytest $(TEST_ARGS) -m "not slow and not wheel" $(TL3_TESTS)
