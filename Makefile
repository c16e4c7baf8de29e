# Lakeside build, test and demo entry points.
#
# `make test` installs what it needs on a fresh Debian machine (PostgreSQL 15) and runs every test.
# `make demo` runs the agent against a throwaway PostgreSQL with a sample workload.

GO        ?= go
BIN       := $(CURDIR)/bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.Version=$(VERSION)
VERSITYGW := $(BIN)/versitygw
VERSITYGW_VERSION := v1.8.0

.PHONY: all build test demo bench deps vet fmt clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/lakeside ./cmd/lakeside

# deps installs what the tests start for real: a PostgreSQL server and headless
# Chromium (Debian packages), and the versitygw S3 server (built once into bin/).
deps: $(VERSITYGW)
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql-15 postgresql-client-15"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(VERSITYGW):
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

test: deps vet
	mkdir -p dist/test-artifacts
	$(GO) test -count=1 -timeout 30m -artifacts -outputdir $(CURDIR)/dist/test-artifacts ./...

demo: deps build
	$(BIN)/lakeside demo

bench: deps build
	$(GO) test -count=1 -tags bench -run '^TestBench' -timeout 60m -v ./cmd/lakeside

clean:
	rm -rf $(BIN) dist
