# Two commands set everything up on a fresh machine with Python 3.11 and make:
#   make demo   compile a preprocessing pipeline for the CPU and compare it with TensorFlow and OpenCV
#   make test   lint, format check, and the test suite (fast tests; `make test-slow` for the rest)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test test-slow lint clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "gdp needs Python 3.11, got " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,serve]'
	touch $(STAMP)

# gdp.cv2's dispatcher in C (gdp/cv2/_dispatch.c), built in place for the venv's Python: the
# NumPy headers give the array struct's layout (its dimensions are read without a NumPy call).
EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
DISPATCH_EXT := gdp/cv2/_dispatch$(EXT_SUFFIX)

$(DISPATCH_EXT): gdp/cv2/_dispatch.c $(STAMP)
	$(CC) -O2 -shared -fPIC -Wall -Werror -o $@ $< $$($(BIN)/python -c 'import numpy, sysconfig; print("-I" + sysconfig.get_paths()["include"], "-I" + numpy.get_include())')

# gdp.runtime's strip pool in C (runtime/_strips.c): it calls TVM's compiled kernels through
# TVM FFI's C ABI (tvm_ffi's headers, installed with it) and links no TVM library.
STRIPS_EXT := runtime/_strips$(EXT_SUFFIX)

$(STRIPS_EXT): runtime/_strips.c $(STAMP)
	$(CC) -O2 -shared -fPIC -Wall -Werror -pthread -o $@ $< $$($(BIN)/python -c 'import numpy, os, sysconfig, tvm_ffi; print("-I" + sysconfig.get_paths()["include"], "-I" + numpy.get_include(), "-I" + os.path.join(os.path.dirname(tvm_ffi.__file__), "include"))')

install: $(STAMP) $(DISPATCH_EXT) $(STRIPS_EXT)

demo: install
	$(BIN)/python samples/demo.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Test processes (pytest-xdist): a compile runs on one core, so two keep both cores of the
# 2-core machine the budget is set for busy; a test file runs whole in one process (its fixtures,
# and the programs its tests share, are built once). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2

# pytest exits 5 when it collected no test: that is a failure here, never a pass.
test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

test-slow: install
	$(BIN)/python -m pytest -m slow

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(DISPATCH_EXT) $(STRIPS_EXT)
