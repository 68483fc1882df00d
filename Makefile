# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CROSS_PACKAGES := gcc-aarch64-linux-gnu gcc-riscv64-linux-gnu libc6-dev-arm64-cross \
                  libc6-dev-riscv64-cross qemu-user
CROSS_TOOLS := aarch64-linux-gnu-gcc riscv64-linux-gnu-gcc qemu-aarch64 qemu-riscv64

.PHONY: demo test cross-tools peers exporters compare-tvm clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# Installs the Debian cross toolchains and qemu-user when missing and running as
# root; otherwise the tests that need them skip with a one-line reason.
cross-tools:
	@missing=""; for t in $(CROSS_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing cross toolchains and qemu-user (missing:$$missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CROSS_PACKAGES) >/dev/null; \
	else \
	  echo "cross toolchains missing ($$missing) and not root: neon/rvv runs will be skipped"; \
	fi

demo: $(BIN)/.installed cross-tools
	$(BIN)/autoconfig demo

test: $(BIN)/.installed cross-tools
	$(BIN)/python -m pytest -q -n 2  # two workers (pytest-xdist): the suite is mostly one-core work

# The peers' environment for scripts/compare_tvm.py, compare_fusion.py's TVM column and
# bench_models.py's OpenVINO and IREE columns:
# TVM 0.27 (Relax, MetaSchedule), OpenVINO 2026.4 and IREE 3.13 apart from
# the project, which never depends on them.
# apache-tvm-ffi 0.1.15 segfaults when tuning starts; xgboost-cpu is MetaSchedule's
# cost model without the GPU library the plain xgboost wheel pulls.
PEERS := .peers
PEERS_PACKAGES := apache-tvm==0.27.0 apache-tvm-ffi==0.1.14.post0 xgboost-cpu psutil cloudpickle onnx numpy openvino==2026.4.1 \
                  iree-base-compiler==3.13.0 iree-base-runtime==3.13.0

# An environment apart from the project's: $(call side_env,DIR,PACKAGES).
define side_env
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet $(2)
	touch $@
endef

$(PEERS)/.installed: Makefile
	$(call side_env,$(PEERS),$(PEERS_PACKAGES))

peers: $(PEERS)/.installed

# Everything compare_tvm.py needs, then the script: `make compare-tvm TVM_ARGS="--parts fusion"`
# gives the fusion table with the real TVM column from a fresh clone.
TVM_ARGS ?=
compare-tvm: $(BIN)/.installed $(PEERS)/.installed
	$(BIN)/python scripts/compare_tvm.py $(TVM_ARGS)

# The exporters' environment for scripts/export_models.py: torch 2.13 (its CPU wheel:
# the version pinned, an unpinned torch pulls the CUDA packages), torchvision 0.28,
# transformers and onnxscript (the dynamo exporter), apart from the project.
EXPORTERS := .exporters
EXPORTERS_PACKAGES := torch==2.13.0 torchvision==0.28.0 'transformers>=5' onnx onnxscript

$(EXPORTERS)/.installed: Makefile
	$(call side_env,$(EXPORTERS),$(EXPORTERS_PACKAGES))

exporters: $(EXPORTERS)/.installed

clean:
	rm -rf $(VENV) $(PEERS) $(EXPORTERS) build *.egg-info
