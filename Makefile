# Quire: `make run` starts the embedded stack and sends the example packet;
# `make test` runs the whole suite. Both create the virtualenv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
UV := VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/uv
MYPY := $(VENV)/bin/mypy libs/*/quire services/*/quire
DATA_DIR ?= .quire
# buf, pinned by tools/install-buf.sh, and the released protos it compares to.
BUF := $(VENV)/buf/node_modules/.bin/buf
PROTOS_BASELINE := protos/released/quire-v1.json
PROTO_FILES := $(shell find protos -name '*.proto' | sort)
# Every distribution, each one folder: installed editable by `make venv`,
# built as wheels by `make wheels`.
DIST_PROJECTS := gen libs/core libs/evidence libs/ops libs/testing $(sort $(wildcard services/*))

.PHONY: run test test-unit docs buf lint style typecheck system-deps openapi protos protos-check protos-lint protos-release bench profile bench-admission bench-validator bench-assembly bench-ledger bench-history bench-slow-uploads bench-proofs bench-corpus bench-decoding bench-quarantine bench-fairness bench-sources eval load soak multinode partitions batch-kills stage-limit corpus venv wheels clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt $(DIST_PROJECTS:%=%/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	# uv (pinned in constraints.txt) installs every distribution editable in
	# seconds where pip took a minute; setuptools first, so that each project
	# builds with the pinned one in place (no isolated build environment).
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt uv
	$(UV) pip install --quiet -c constraints.txt setuptools
	$(UV) pip install --quiet --compile-bytecode --no-build-isolation -c constraints.txt $(DIST_PROJECTS:%=-e %) -e '.[dev]'
	touch $@

run: venv
	$(VENV)/bin/quire up --data-dir $(DATA_DIR) --example examples/lease-renewal

# The suite runs in four pytest-xdist workers on two cores (most of a stack
# test's time is waiting on processes: with three, the cores sat idle for
# about half the run), a test file per worker at a time:
# module fixtures stay whole and each worker has its own session stack. The
# files go out longest first (conftest.py's HEAVY_FIRST), not re-sorted by
# their number of tests, and the files that share a stack as one unit
# (STACK_GROUPS).
# TEST_WORKERS=0 runs it in this process. mypy checks the types beside the
# suite (on one core, for about 20 s, while the suite leaves some idle); its
# report follows the suite's, and either failing fails `make test`.
TEST_WORKERS ?= 4
DIST = --dist loadfile --no-loadscope-reorder
test: venv system-deps protos-check protos-lint style
	@$(MYPY) > $(VENV)/mypy.log 2>&1 & typecheck=$$!; \
	$(PY) -m pytest -n $(TEST_WORKERS) $(DIST); suite=$$?; \
	wait $$typecheck; types=$$?; \
	echo "$(MYPY)"; cat $(VENV)/mypy.log; \
	[ $$suite -eq 0 ] && [ $$types -eq 0 ]

# The unit tier alone: every test that starts no stack, reads no corpus and
# breaks nothing (quire.testing.tiers); a minute or two.
test-unit: venv buf
	$(PY) -m pytest -n $(TEST_WORKERS) $(DIST) -m "not stack and not fault and not corpus"

# The documentation site (MkDocs, Material theme) in site/: the reference
# pages regenerated from the code first (tools/docgen.py), then built in
# strict mode, so a broken link or an unknown page fails it.
docs: venv
	$(PY) tools/docgen.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "site: $(CURDIR)/site/index.html"

system-deps:
	@sh tools/install-system-deps.sh

lint: style typecheck

style: venv
	$(VENV)/bin/ruff check libs services tests bench examples tools
	$(VENV)/bin/ruff format --check libs services tests bench examples tools

typecheck: venv
	$(MYPY)

# The standard packet, then make load's lease class (one 200-page document per
# packet); each run writes its own section of docs/performance.md.
BENCH_LEASE_JOBS ?= 150
bench: venv
	BENCH_DOCS=docs/performance.md $(PY) bench/pipeline_bench.py
	BENCH_DOCS=docs/performance.md BENCH_PAGES=200 BENCH_JOBS=$(BENCH_LEASE_JOBS) $(PY) bench/pipeline_bench.py

profile: venv
	BENCH_PROFILE_DIR=$(CURDIR)/profiles $(PY) bench/pipeline_bench.py
	@echo "flame graphs: $(CURDIR)/profiles/<service>.svg"

soak: venv
	$(PY) bench/soak.py

# Two replicas of every service on a 3-node NATS cluster and PostgreSQL, 200
# jobs, a NATS node and one replica of each killed midway (the suite runs 12).
multinode: venv system-deps
	MULTINODE_JOBS=200 $(PY) -m pytest -q tests/test_multinode.py

# Seeded fault schedules on the cluster in network namespaces (issue 42): 20 by
# default, each history-checked; reports in reports/partitions/. Root only.
# SEEDS=7 reproduces one; SCHEDULES, FAULTS, STRIKES, JOBS_PER_CLIENT size it.
partitions: venv system-deps
	$(PY) bench/partitions.py

# A 1,000-packet batch while admission (the batch dispatcher) is SIGKILLed
# five times: one job per packet, and quire check (the suite runs 150 and 3).
batch-kills: venv
	BATCH_KILL_PACKETS=1000 BATCH_KILLS=5 $(PY) -m pytest -q -s tests/test_batch_dispatcher_kills.py

# Ten assembler replicas, 36 jobs, under a stage limit of 3 (the suite runs five and 24).
stage-limit: venv
	STAGE_LIMIT_REPLICAS=10 STAGE_LIMIT_JOBS=36 $(PY) -m pytest -q tests/test_stage_limit.py

# Every file of the shared corpus through the stack (the suite sends a sample).
corpus: venv
	CORPUS_EVERY=1 $(PY) -m pytest -q tests/test_corpus.py

bench-admission: venv
	$(PY) bench/admission_bench.py

bench-validator: venv
	$(PY) bench/validator_bench.py

bench-assembly: venv
	$(PY) bench/assembly_bench.py

bench-ledger: venv
	$(PY) bench/ledger_bench.py

bench-history: venv
	$(PY) bench/history_bench.py

bench-slow-uploads: venv
	$(PY) bench/slow_uploads_bench.py

bench-proofs: venv
	$(PY) bench/proof_size_bench.py
	$(PY) bench/evidence_size_bench.py

bench-corpus: venv
	$(PY) bench/corpus_bench.py

bench-quarantine: venv
	$(PY) bench/quarantine_bench.py

bench-decoding: venv
	$(PY) bench/decoding_bench.py

bench-fairness: venv
	$(PY) bench/fairness_bench.py

bench-sources: venv
	$(PY) bench/sources_bench.py

load: venv
	$(PY) -m bench.load.main

# The fidelity harness: the structured corpus in bench/eval rendered in both
# profiles and compared with bench/eval/expected.json (text, page images,
# totals); exits 1 on any change. `$(PY) -m bench.eval.main --approve`
# accepts a change, to be reviewed and committed.
eval: venv system-deps
	$(PY) -m bench.eval.main --report eval-report.json

protos: venv
	rm -rf gen/quire
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=gen --pyi_out=gen --grpc_python_out=gen $(PROTO_FILES)

# The HTTP gateway's OpenAPI document, as the app serves it at /openapi.json;
# tests/test_gateway.py fails when the committed one differs.
openapi: venv
	$(PY) -m quire.gateway.openapi > services/gateway/openapi.json

protos-check: venv
	@rm -rf $(VENV)/protos-check && mkdir -p $(VENV)/protos-check
	@$(PY) -m grpc_tools.protoc -Iprotos --python_out=$(VENV)/protos-check --pyi_out=$(VENV)/protos-check --grpc_python_out=$(VENV)/protos-check $(PROTO_FILES)
	@diff -r -x __pycache__ $(VENV)/protos-check/quire gen/quire && echo "generated code matches protos/"

# buf lint, and buf breaking against the last released protos: fails on a
# removed or renamed field, a reused number, a changed type (protos/buf.yaml,
# protos/VERSIONING.md).
protos-lint: buf
	$(BUF) lint protos
	$(BUF) breaking protos --against $(PROTOS_BASELINE)

buf: venv system-deps
	@VENV=$(VENV) sh tools/install-buf.sh

# Cut a new baseline from protos/ as they are: done at a release, or to
# accept a change listed by buf breaking (VERSIONING.md says when).
protos-release: venv
	@VENV=$(VENV) sh tools/install-buf.sh
	$(BUF) lint protos
	@if [ -f $(PROTOS_BASELINE) ]; then $(BUF) breaking protos --against $(PROTOS_BASELINE) || echo "protos-release: the new baseline accepts the changes above"; fi
	@mkdir -p $(dir $(PROTOS_BASELINE))
	$(BUF) build protos --exclude-source-info -o '-#format=json' | $(PY) -m json.tool --indent 1 > $(PROTOS_BASELINE).tmp
	@mv $(PROTOS_BASELINE).tmp $(PROTOS_BASELINE) && echo "cut $(PROTOS_BASELINE)"

# One wheel per distribution (and the `quire` one that names them all), as
# the Containerfile installs them: `pip install --find-links dist quire`.
wheels: venv
	rm -rf dist $(DIST_PROJECTS:%=%/build) build && $(PY) -m pip wheel --quiet --no-deps -w dist $(DIST_PROJECTS:%=./%) .

# The distributions as an operator installs them: the wheels into a fresh
# virtualenv by pip, dependencies and all, and the whole system run from it
# (`quire up --example`). The suite checks the same wheels' contents and
# dependencies and imports them unpacked, without pip or a running system.
.PHONY: distributions
distributions: venv system-deps
	TEST_TARGET=distributions $(PY) -m pytest -q tests/test_distributions.py

clean:
	rm -rf $(VENV) $(DATA_DIR) dist
