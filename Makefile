# Lakeside build, test and demo entry points.
#
# `make test` installs what it needs on a fresh Debian machine (PostgreSQL 15) and runs every test.
# `make demo` runs the agent against a throwaway PostgreSQL with a sample workload.
# `make package` builds the .deb and .rpm packages (amd64, arm64) into dist/.

GO        ?= go
BIN       := $(CURDIR)/bin
DIST      ?= $(CURDIR)/dist

# VERSION is compiled into the binary (`lakeside version` prints it) and is
# the version of the packages, so it must be valid for both dpkg and rpm: it
# starts with a digit and has no "-". It is derived from `git describe`:
#   tag v1.2.3                         1.2.3
#   5 commits after v1.2.3             1.2.3+git5.gabc1234
#   pre-release tag v1.3.0-rc1         1.3.0~rc1  (sorts before 1.3.0)
#   no v* tag yet, 44 commits          0.0.0~git44.gabc1234  (before any release)
#   uncommitted changes                ... with .dirty appended
#   no git                             0.0.0~unknown
# Override it with `make VERSION=1.2.3 ...`.
ifndef VERSION
VERSION := $(shell \
	if d=$$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then \
		echo "$$d" | sed -E 's/^v//; s/-([0-9]+)-g([0-9a-f]+)/+git\1.g\2/; s/-dirty$$/.dirty/; s/-/~/g'; \
	elif d=$$(git describe --always --dirty 2>/dev/null); then \
		echo "0.0.0~git$$(git rev-list --count HEAD).g$$d" | sed 's/-dirty$$/.dirty/'; \
	else \
		echo 0.0.0~unknown; \
	fi)
endif
LDFLAGS   := -X main.Version=$(VERSION)
VERSITYGW := $(BIN)/versitygw
VERSITYGW_VERSION := v1.8.0
NFPM      := $(BIN)/nfpm
NFPM_VERSION := v2.45.2
STATICCHECK := $(BIN)/staticcheck
STATICCHECK_VERSION := v0.8.2
PACKAGE_ARCHS ?= amd64 arm64
# TEST_TAGS compiles in the failpoints the crash tests simulate crashes at
# (agent/internal/applier/failpoints_on.go); a build without the tag, as
# `make build` and `make package` do, has none of them, and a test that
# needs them skips itself.
TEST_TAGS := -tags failpoints

.PHONY: all build test test-short fuzz chaos demo bench deps vet fmt clean package version

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/lakeside ./cmd/lakeside

# version prints the version the binary and the packages get.
version:
	@echo $(VERSION)

# package builds lakeside_<version>_<arch>.deb and lakeside-<version>.<arch>.rpm
# (x86_64, aarch64) into $(DIST) for each of $(PACKAGE_ARCHS), from a static
# binary cross-compiled into $(DIST)/linux_<arch>/, with nfpm (packaging/nfpm.yaml).
package: $(NFPM)
	@set -e; mkdir -p $(DIST); \
	for arch in $(PACKAGE_ARCHS); do \
		case $$arch in amd64) rpmarch=x86_64;; arm64) rpmarch=aarch64;; *) rpmarch=$$arch;; esac; \
		echo "package: lakeside $(VERSION) linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o $(DIST)/linux_$$arch/lakeside ./cmd/lakeside; \
		export VERSION='$(VERSION)' GOARCH=$$arch LAKESIDE_BINARY=$(DIST)/linux_$$arch/lakeside; \
		$(NFPM) package --config packaging/nfpm.yaml --packager deb \
			--target $(DIST)/lakeside_$(VERSION)_$$arch.deb; \
		$(NFPM) package --config packaging/nfpm.yaml --packager rpm \
			--target $(DIST)/lakeside-$(VERSION).$$rpmarch.rpm; \
	done

# deps installs what the tests start for real: a PostgreSQL server and headless
# Chromium (Debian packages), and the versitygw S3 server (built once into bin/);
# for the package test, nfpm (built once into bin/), rpm (to query the .rpm),
# systemd (systemd-analyze) and procps (/bin/kill, which the unit needs); for
# the alerting rules' test, promtool (Debian's prometheus package).
deps: $(VERSITYGW) $(NFPM)
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql-15 postgresql-client-15"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v rpm >/dev/null 2>&1 || missing="$$missing rpm"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	test -x /bin/kill || missing="$$missing procps"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(VERSITYGW):
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

# nfpm is pinned at a release known to work (newer ones did not). It is a
# build tool, not a module requirement of Lakeside.
$(NFPM):
	GOBIN=$(BIN) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# vet runs go vet, gofmt, staticcheck (with and without the failpoints),
# the import layering check (layering_test.go: imports point down the data
# flow) and the check of the docs' references to the code (docs_test.go).
vet: $(STATICCHECK)
	$(GO) vet ./...
	$(GO) vet $(TEST_TAGS) ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(STATICCHECK) ./...
	$(STATICCHECK) $(TEST_TAGS) ./...
	$(GO) test -count=1 -run '^(TestImportLayering|TestDocs)$$' .

# test-short runs the tests that start nothing (no PostgreSQL, S3 server,
# browser or package build), in about a minute.
test-short:
	$(GO) test $(TEST_TAGS) -short -count=1 ./...

# RACE_PACKAGES run a second time under the race detector: the packages whose
# goroutines share state (capture reads and writes on goroutines of its own,
# a flush writes its tables side by side, the agent's stages share the
# state file, and the sites of a fleet commit into one table at once).
RACE_PACKAGES := ./agent ./agent/internal/applier ./agent/internal/source ./store ./uploader ./uploader/fleet

# FUZZTIME is how long `make fuzz` fuzzes each target: 10s in `make test`,
# longer by hand (make fuzz FUZZTIME=5m). A new interesting input is
# minimised for at most 2s, not the default 60s, which a target of large
# inputs (FuzzReadCheckpoint) would otherwise spend its whole time on; one
# worker (-parallel 1) leaves the other core to the tests beside it.
FUZZTIME ?= 10s

# fuzz runs every fuzz target of the repository (func Fuzz... in a tracked
# _test.go file) for FUZZTIME, one after the other; the main pass runs
# their seed corpora (testdata/fuzz) as plain tests. Each package's test
# binary is built once, instrumented for fuzzing (go test -c -fuzz), and
# run for each of its targets as go test -fuzz would run it, which links
# a binary per target: in the package's directory, with the interesting
# inputs kept in Go's cache ($GOCACHE/fuzz), where go test -fuzz finds
# them. An input that fails is written to the target's testdata/fuzz,
# where it stays as a regression test once the bug is fixed. Go 1.26's
# coordinator may fail a target with "context deadline exceeded" as
# FUZZTIME ends, writing no input (golang/go#75804, fixed in 1.27): that
# is reported, not failed.
fuzz:
	@failed=0; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; log=$$tmp/log; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	for file in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
		dir=$$(dirname $$file); bin=$$tmp/$$(echo $$dir | tr / _).test; \
		if [ ! -e $$bin ] && ! $(GO) test -c -fuzz . -ldflags '-s -w' -o $$bin ./$$dir > $$log 2>&1; then \
			echo "FAIL ./$$dir: go test -c -fuzz"; cat $$log; failed=1; continue; \
		fi; \
		pkg=$$($(GO) list ./$$dir); \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			start=$$(date +%s); \
			if (cd $$dir && $$bin -test.paniconexit0 -test.fuzzcachedir=$$cache/$$pkg -test.timeout=10m \
				-test.run='^$$' -test.fuzz="^$$target\$$" -test.fuzztime=$(FUZZTIME) -test.fuzzminimizetime=2s \
				-test.parallel=1) > $$log 2>&1; then \
				echo "ok   $$target ./$$dir $$(($$(date +%s) - start))s"; \
			elif grep -q '^    context deadline exceeded$$' $$log && ! grep -q 'Failing input written' $$log; then \
				echo "ok   $$target ./$$dir $$(($$(date +%s) - start))s (Go's deadline race, golang/go#75804)"; \
			else \
				echo "FAIL $$target ./$$dir"; cat $$log; failed=1; \
			fi; \
		done; \
	done; \
	exit $$failed

# The race pass and the fuzz pass (make fuzz) run beside the main one, their
# output printed once it ends, and tests marked parallel run three at a
# time: the tests mostly wait (for PostgreSQL, fsyncs, the agent's
# intervals), so all take about as long as the longest of what runs at
# once. The fuzz pass takes a few minutes, well within the main pass.
test: deps vet
	mkdir -p dist/test-artifacts
	@$(GO) test $(TEST_TAGS) -race -count=1 -timeout 20m $(RACE_PACKAGES) > dist/test-artifacts/race.log 2>&1 & race=$$!; \
	$(MAKE) -s fuzz > dist/test-artifacts/fuzz.log 2>&1 & fuzz=$$!; \
	$(GO) test $(TEST_TAGS) -count=1 -parallel 3 -timeout 30m -artifacts -outputdir $(CURDIR)/dist/test-artifacts ./...; main=$$?; \
	wait $$race; raced=$$?; \
	wait $$fuzz; fuzzed=$$?; \
	echo "race pass ($(RACE_PACKAGES)):"; cat dist/test-artifacts/race.log; \
	echo "fuzz pass (every fuzz target for $(FUZZTIME)):"; cat dist/test-artifacts/fuzz.log; \
	test $$main -eq 0 && test $$raced -eq 0 && test $$fuzzed -eq 0

# chaos runs the fault-injection harness at length (cmd/lakeside
# chaos_long_test.go): the real agent, PostgreSQL and S3 behind proxies of
# its own, SIGKILLs, crashes, outages, cuts, stalls and slow links at moments
# from a printed seed (LAKESIDE_CHAOS_SEED=n replays it), then the
# invariant checks; a table of what it injected and checked is printed.
# make test runs its CI-sized form, TestChaos.
chaos: deps build
	$(GO) test -tags chaos -count=1 -run '^TestChaos' -timeout 60m -v ./cmd/lakeside

demo: deps build
	$(BIN)/lakeside demo

# The benchmark packages run one after the other (-p 1): run together, they
# would share the cores and each one's figures would be the other's noise.
bench: deps build
	$(GO) test -p 1 -count=1 -tags bench -run '^TestBench' -timeout 60m -v ./cmd/lakeside ./uploader ./uploader/fleet ./delta/internal/duckdbtest

clean:
	rm -rf $(BIN) dist
