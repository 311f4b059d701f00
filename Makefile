# tributary — the commands the README gives.
#   make run    find or start Postgres (and RabbitMQ), migrate, run a worker with demo jobs
#   make test   gofmt + go vet + repocheck (file sizes and binaries, doc links,
#               the import graph) + the API listing check + go test -race
#               against real Postgres and RabbitMQ
#   make api    rewrite the exported API listing in api/ (after a deliberate API change)
#   make bench  benchmarks (figures go to docs/BENCHMARKS.md)
#   make chaos  long fault-injection runs (docs/RELIABILITY.md)
SHELL := /bin/bash
GO ?= go
BIN := bin/tributary
TEST_TIMEOUT ?= 9m
# Most tests wait on other processes, timeouts and Postgres rather than the
# CPU (a SIGKILLed worker's 30 s liveness timeout, a 20 s job): four at once
# per package instead of GOMAXPROCS (2 here) halves cmd/tributary's time.
TEST_PARALLEL ?= 4
STATICCHECK_VERSION ?= v0.8.2

.PHONY: build run test lint api bench chaos clean

build:
	$(GO) build -o $(BIN) ./cmd/tributary

run: build
	@scripts/run.sh

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

test: build
	@scripts/ensure-chromium.sh && \
	eval "$$(scripts/services.sh env test)" && \
	unformatted=$$(gofmt -l $$(git ls-files '*.go')) && \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi && \
	$(GO) vet ./... && \
	$(GO) run ./scripts/repocheck && \
	GO=$(GO) scripts/check-api.sh && \
	$(GO) test -race -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) ./... && \
	scripts/test-private-cluster.sh && \
	scripts/test-run.sh

api:
	$(GO) run ./scripts/apilist -o api

bench: build
	@eval "$$(scripts/services.sh env run)" && scripts/bench.sh

chaos: build
	@eval "$$(scripts/services.sh env test)" && scripts/chaos.sh

clean:
	rm -rf bin
