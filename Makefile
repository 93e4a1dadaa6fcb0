# claimfirst: exactly-once effects for SQS consumers.
# `make help` lists the targets.

SHELL := /bin/bash
GO ?= go
# go.mod's toolchain line names the Go release that builds and tests run on
# (the one whose known vulnerabilities are fixed, see `make vuln`); auto lets
# the go command fetch it through the module proxy where the environment
# says GOTOOLCHAIN=local. `make test TOOLCHAIN=local` uses the installed Go.
TOOLCHAIN ?= auto
export GOTOOLCHAIN := $(TOOLCHAIN)
BIN := bin
GOLANGCI_LINT_VERSION ?= v2.15.0
TEST_FLAGS ?= -race -count=1 -timeout 20m -parallel 4
EMULATOR := emulator/with-emulator.sh
# A throwaway PostgreSQL cluster (or the user's own, when DATABASE_URL is set).
POSTGRES := emulator/with-postgres.sh
# A throwaway Kafka cluster (franz-go's kfake, its own process), or the user's own (KAFKA_BROKERS).
KAFKA := emulator/with-kafka.sh
# A throwaway RabbitMQ broker (Debian's rabbitmq-server, its own epmd), or the user's own (AMQP_URL).
RABBITMQ := emulator/with-rabbitmq.sh
IMAGE ?= claimfirst-worker
# The AWS Lambda Runtime Interface Emulator, pinned; the Lambda test runs bootstrap under it.
RIE_VERSION ?= v0.0.0-20261030222936-bef5c4ba774d
LAMBDA_BUILD := CGO_ENABLED=0 GOOS=linux $(GO) build -tags lambda.norpc -trimpath -ldflags "-s -w"

# Python tools (moto for python3, cfn-lint, aws): those present are used;
# `make tools` installs requirements-dev.txt into $(VENV) when one is missing,
# and $(VENV)/bin comes after PATH's own.
VENV := .venv
export PATH := $(PATH):$(CURDIR)/$(VENV)/bin

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/worker.
	$(GO) build -o $(BIN)/worker ./cmd/worker

.PHONY: test
test: tools cfn-lint rie model ## Run every test (unit, conformance, integration) with -race against a fresh emulator, PostgreSQL, Kafka and RabbitMQ, and the model.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	@# -bench . -benchtime 1x: every benchmark runs once too (in the same binaries, so no second build), so one that cannot start fails here, not first under `make bench`.
	@# The simulator's seeds run beside the rest (most of whose time is waiting on real seconds); their output follows it.
	@# The Kafka world's tests build with -tags synctests (kgo's and kfake's mutexes then block durably under synctest).
	@mkdir -p $(BIN); ( $(GO) test -count=1 -run '^TestSeeds$$' ./sim -sim.seeds=1000 && \
		$(GO) test -tags synctests -count=1 -run '^TestKafka(Seeds|Mutants)$$' ./sim -sim.kafka=$(KAFKA_TEST_SEEDS) && \
		$(GO) test -tags synctests -race -count=1 -run '^TestKafkaSeeds$$' ./sim -sim.kafka=20 ) >$(BIN)/sim-test.log 2>&1 & sim=$$!; \
	AWS_LAMBDA_RIE=$(CURDIR)/$(BIN)/aws-lambda-rie $(EMULATOR) $(POSTGRES) $(KAFKA) $(RABBITMQ) $(GO) test $(TEST_FLAGS) -bench . -benchtime 1x ./... || rc=$$?; \
	wait $$sim || rc=$${rc:-$$?}; echo "--- the simulator's seeds:"; cat $(BIN)/sim-test.log; exit $${rc:-0}

.PHONY: bench
bench: ## Measure requests and CPU per message: the protocol alone, a worker against the emulator, the Kafka and RabbitMQ transports against their floors.
	$(GO) test -run '^$$' -bench BenchmarkProcess -benchtime 20000x ./worker/
	$(EMULATOR) $(GO) test -run '^$$' -bench BenchmarkWorker -benchtime 1000x ./integration/
	$(EMULATOR) $(GO) test -run '^$$' -bench BenchmarkCache -benchtime 200x -timeout 30m ./integration/
	$(GO) test -run '^$$' -bench BenchmarkCost -benchtime 20000x ./integration/
	$(GO) test -run '^$$' -bench BenchmarkRSS -benchtime 1x ./integration/
	$(POSTGRES) $(GO) test -run '^$$' -bench BenchmarkPostgresClaims -benchtime 5000x ./claimstore/postgres/
	$(EMULATOR) $(POSTGRES) $(GO) test -run '^$$' -bench BenchmarkWorkerPostgres -benchtime 1000x ./integration/
	@# Both brokers run even when the first misses its bounds; either missing them fails.
	k=0; $(KAFKA) $(GO) test -run '^$$' -bench BenchmarkKafka -benchtime 50000x ./integration/ || k=$$?; \
	$(RABBITMQ) $(GO) test -run '^$$' -bench BenchmarkRabbit -benchtime 20000x ./integration/ && exit $$k

.PHONY: lambda
lambda: ## Build the Lambda bootstrap for provided.al2023: dist/lambda/ (arm64) and dist/lambda-amd64/.
	GOARCH=arm64 $(LAMBDA_BUILD) -o dist/lambda/bootstrap ./cmd/worker
	GOARCH=amd64 $(LAMBDA_BUILD) -o dist/lambda-amd64/bootstrap ./cmd/worker

.PHONY: rie
rie: ## Install the Lambda Runtime Interface Emulator into bin/ at the pinned version if missing.
	@test -x $(BIN)/aws-lambda-rie || GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

.PHONY: model
model: spin ## Model-check the claim protocol with SPIN (model/): every configuration exhaustively, and each mutant's counterexample.
	model/check.sh

.PHONY: spin
spin: ## Install Debian's spin package (the model checker) and gcc if missing.
	@if ! command -v spin >/dev/null || ! command -v gcc >/dev/null; then \
		echo "tools: spin or gcc not on PATH; installing Debian's spin and gcc"; \
		if ! command -v apt-get >/dev/null; then \
			echo "tools: no apt-get here: install spin (https://spinroot.com) and gcc, then rerun" >&2; exit 3; \
		elif [ "$$(id -u)" = 0 ]; then \
			{ apt-get install -y -q spin gcc || { apt-get update -q && apt-get install -y -q spin gcc; }; } || exit 3; \
		elif command -v sudo >/dev/null; then \
			{ sudo apt-get install -y -q spin gcc || { sudo apt-get update -q && sudo apt-get install -y -q spin gcc; }; } || exit 3; \
		else \
			echo "tools: spin is missing and cannot be installed as $$(id -un) without sudo: apt-get install spin gcc" >&2; exit 3; \
		fi; \
	fi

.PHONY: tools
tools: spin ## Use moto, cfn-lint, the aws CLI, PostgreSQL and RabbitMQ from PATH, or install the missing (.venv, Debian's postgresql and rabbitmq-server); spin from Debian.
	@missing=""; \
	python3 -c 'import moto, werkzeug' 2>/dev/null || $(VENV)/bin/python -c 'import moto, werkzeug' 2>/dev/null || missing=" moto"; \
	for t in cfn-lint aws; do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		echo "tools: not on PATH:$$missing; installing requirements-dev.txt into $(VENV)"; \
		python3 -m venv $(VENV) || { echo "tools: python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 3; }; \
		$(VENV)/bin/pip install --quiet -r requirements-dev.txt || exit 3; \
	fi
	@# PostgreSQL's server binaries, for the throwaway cluster of `make test` (unless DATABASE_URL names a server).
	@if [ -z "$$DATABASE_URL" ] && ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then \
			echo "tools: PostgreSQL server not found; installing Debian's postgresql"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >/dev/null || exit 3; \
		else \
			echo "tools: PostgreSQL server (initdb) not found: apt-get install postgresql (Debian/Ubuntu), brew install postgresql, or set DATABASE_URL to a server" >&2; exit 3; \
		fi; \
	fi
	@# RabbitMQ's server, for the throwaway broker of `make test` (unless AMQP_URL names a broker).
	@if [ -z "$$AMQP_URL" ] && ! ls /usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server >/dev/null 2>&1; then \
		if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then \
			echo "tools: rabbitmq-server not found; installing Debian's rabbitmq-server"; \
			{ DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server >/dev/null || \
				{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server >/dev/null; }; } || exit 3; \
		else \
			echo "tools: rabbitmq-server not found: apt-get install rabbitmq-server (Debian/Ubuntu), or set AMQP_URL to a broker" >&2; exit 3; \
		fi; \
	fi

# govulncheck, pinned, against a vulnerability database built here from the
# golang.org/x/vulndb module (its OSV files, indexed by its own indexdb), so
# that only the Go module proxy is reached. VULNDB_VERSION defaults to the
# newest; the database is kept in bin/ per version. It checks the
# toolchain go.mod names (see TOOLCHAIN).
GOVULNCHECK_VERSION ?= v1.10.0
INDEXDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
VULNDB_VERSION ?= latest

.PHONY: vuln
vuln: ## Fail on a vulnerability the code reaches (govulncheck; its database built from the module proxy's golang.org/x/vulndb).
	@set -euo pipefail; \
	dir=$$(cd / && $(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	test -d "$$dir/data/osv" || { echo "vuln: golang.org/x/vulndb@$(VULNDB_VERSION) has no data/osv" >&2; exit 3; }; \
	db=$(CURDIR)/$(BIN)/vulndb/$$(basename "$$dir"); \
	if [ ! -f "$$db/index/db.json" ]; then \
		rm -rf "$$db.tmp"; \
		$(GO) run golang.org/x/vulndb/cmd/indexdb@$(INDEXDB_VERSION) -vulns "$$dir/data/osv" -out "$$db.tmp"; \
		mv "$$db.tmp" "$$db"; \
	fi; \
	echo "vuln: database $$(basename "$$dir")"; \
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) -db "file://$$db" ./...

.PHONY: cfn-lint
cfn-lint: ## Lint template.yaml with cfn-lint; errors and warnings fail.
	@command -v cfn-lint >/dev/null || { echo "cfn-lint is not installed: pip install cfn-lint" >&2; exit 3; }
	cfn-lint template.yaml

.PHONY: docker
docker: ## Build the container image that runs `worker run` (IMAGE=claimfirst-worker).
	docker build -t $(IMAGE) .

SEEDS ?= 1000
KAFKA_SEEDS ?= 1000
KAFKA_TEST_SEEDS ?= 300

.PHONY: sim
sim: ## Run the simulator's soak over SEEDS SQS fault schedules and KAFKA_SEEDS Kafka ones (default 1000 each) and print their tables.
	$(GO) run ./cmd/worker sim -seeds $(SEEDS)
	$(GO) test -tags synctests -c -o $(BIN)/sim.test ./sim
	$(BIN)/sim.test -test.run '^TestKafkaSeeds$$' -sim.kafka=$(KAFKA_SEEDS) -sim.table

.PHONY: unit
unit: ## Run the tests that need no emulator (the others skip, saying so).
	$(GO) test $(TEST_FLAGS) ./...

.PHONY: lint
lint: ## Run golangci-lint (installed into bin/ at the pinned version if missing).
	@test -x $(BIN)/golangci-lint || GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(BIN)/golangci-lint run ./...

.PHONY: demo
demo: ## Run the experiments on the embedded defaults.
	$(GO) run ./cmd/worker demo

.PHONY: kafka
kafka: ## Serve a throwaway Kafka cluster (kfake) on a free loopback port until Ctrl-C.
	$(KAFKA)

.PHONY: emulator
emulator: tools ## Serve the emulator (SQS + DynamoDB) on a free loopback port until Ctrl-C; prints the exports to use it.
	$(EMULATOR)

.PHONY: postgres
postgres: tools ## Serve a throwaway PostgreSQL on a free loopback port until Ctrl-C; prints the DATABASE_URL to use it.
	$(POSTGRES)

.PHONY: clean
clean: ## Remove build output.
	rm -rf $(BIN) dist
