# Every target installs what it needs into .venv on its own: a fresh clone needs only Python and pip.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow smoke bench bench-xml lint schedules clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,ray,plot]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/teccl topo show dgx1
	mkdir -p out
	$(BIN)/teccl compile dgx1 --collective allgather --size 64MB --chunks auto -o out/dgx1-allgather.xml
	@echo "demo output written to out/dgx1-allgather.xml"

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -rs

# the end-to-end tests marked slow, left out of `make test` (CI runs both)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -rs -m slow

# `pip install .` into a fresh venv, no extras, and every subcommand once (needs no .venv)
smoke:
	$(PYTHON) -m devtools.smoke

# each saved run is replaced only once its tool has finished (a stopped run keeps the last one)
bench: $(STAMP)
	$(BIN)/python -m devtools.bench default --no-fail --readme docs/benchmarks.md
	$(BIN)/python -m devtools.sweep_bench --json > bench/sweep_speedup.json.new
	mv bench/sweep_speedup.json.new bench/sweep_speedup.json
	@cat bench/sweep_speedup.json
	$(BIN)/python -m devtools.jobs_bench --no-fail --json > bench/jobs.json.new
	mv bench/jobs.json.new bench/jobs.json
	$(BIN)/python -m devtools.jobs_bench --table bench/jobs.json
	$(BIN)/python -m devtools.recompile --no-fail
	$(BIN)/python -m devtools.nvls_bench --no-fail --json > bench/nvls.json.new
	mv bench/nvls.json.new bench/nvls.json
	@cat bench/nvls.json
	# the bound goals: AllReduce rows; rooted rows (Broadcast, Reduce, Gather, Scatter of 64 MB from root 0 on every shipped topology, each its own target) and AlltoAll of 64 MB and 1 GB (1 KB, 64 KB on 8-32 GPUs) at the default limit
	$(BIN)/python -m devtools.bench bound --no-fail --out bench/bound
	# every shipped topology x collective x size at the default time limit, each row
	# stopped at its first file (suite docstring in devtools/suites.py)
	$(BIN)/python -m devtools.bench defaults-first --no-fail --out bench/defaults

# the 64-1024-GPU instances lowered to MSCCL XML and verified (the saved run is replaced
# only once every row has run)
bench-xml: $(STAMP)
	$(BIN)/python -m devtools.scale_xml --json > bench/scale_xml.json.new
	mv bench/scale_xml.json.new bench/scale_xml.json
	$(BIN)/python -m devtools.scale_xml --table bench/scale_xml.json

lint: $(STAMP)
	$(BIN)/ruff check te_ccl tests devtools

schedules: $(STAMP)
	$(BIN)/python -m devtools.ship_schedules schedules --max-file-size 256KiB
	$(BIN)/python -m devtools.ship_families schedules/families --max-file-size 256KiB

clean:
	rm -rf $(VENV) out
