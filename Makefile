# alineo: see README.md. Every target works on a fresh machine with Go installed.
GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?=
BENCHTIME ?= 1x
VERSITYGW_VERSION ?= v1.8.0
# Prometheus's promtool (the module's v0.316.0 is Prometheus 3.x's promtool).
PROMTOOL_VERSION ?= v0.316.0

# Every binary is statically linked: sandboxd bind-mounts itself into each
# sandbox as its init and execd, and a root built from an image has no libc
# of the host's (cmd/sandboxd's TestStaticBuild checks this line). The race
# detector needs cgo: with -race in TESTFLAGS (CI's `make test
# TESTFLAGS=-race`, test-race) cgo stays on, and the tests that need a static
# init build one.
export CGO_ENABLED = 0
ifneq (,$(findstring -race,$(TESTFLAGS)))
export CGO_ENABLED = 1
endif

.PHONY: build test test-race lint bench demo clean deps deps-runc deps-net deps-soak-hosts soak soak-ci soak-1host soak-1host-ci soak-volumes test-race-stress

# Sandboxes run under runc on a per-sandbox ext4 disk (e2fsprogs): installed
# here when missing, as root (which sandboxd needs). runc is RUNC_VERSION,
# built from the Go module proxy with seccomp (Debian's libseccomp-dev and
# gcc) into /usr/local/bin, unless a runc at least as new is on the PATH:
# Debian 12's runc 1.1.5 lacks the fixes of the November 2025 advisories,
# and sandboxd refuses it (--allow-old-runtime).
RUNC_VERSION ?= 1.5.3
deps: deps-runc deps-net
	@need=""; command -v mkfs.ext4 >/dev/null 2>&1 || need="$$need e2fsprogs"; \
	if [ -n "$$need" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "missing:$$need (install them as root: apt-get install$$need)"; exit 1; fi; \
	  echo "installing:$$need"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need >/dev/null; \
	fi
	@# The snapshot blob store's S3 tests run a real S3 server, versitygw, built
	@# from the Go module proxy (about two minutes) when missing: into
	@# /usr/local/bin as root, else into go env GOPATH's bin, where testenv looks.
	@if ! command -v versitygw >/dev/null 2>&1 && [ ! -x /usr/local/bin/versitygw ] && [ ! -x "$$($(GO) env GOPATH)/bin/versitygw" ]; then \
	  echo "installing: versitygw $(VERSITYGW_VERSION)"; \
	  if [ "$$(id -u)" = 0 ]; then export GOBIN=/usr/local/bin; fi; \
	  $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	fi
	@# The metrics tests (executor, sandboxd) run promtool check metrics on
	@# what /metrics serves: promtool, built from the Go module proxy (about
	@# two minutes) when missing, where versitygw goes (testenv.FindPromtool).
	@if ! command -v promtool >/dev/null 2>&1 && [ ! -x /usr/local/bin/promtool ] && [ ! -x "$$($(GO) env GOPATH)/bin/promtool" ]; then \
	  echo "installing: promtool $(PROMTOOL_VERSION)"; \
	  if [ "$$(id -u)" = 0 ]; then export GOBIN=/usr/local/bin; fi; \
	  $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION); \
	fi

# The soak's network tests (cmd/soak/internal/soak, as root) and the
# multi-host soak make network namespaces, a bridge and veths with ip
# (Debian's iproute2), installed here when missing, as root.
deps-net:
	@if ! command -v ip >/dev/null 2>&1; then \
	  if [ "$$(id -u)" != 0 ]; then echo "missing: ip (install it as root: apt-get install iproute2)"; exit 1; fi; \
	  echo "installing: iproute2"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null; \
	fi

deps-runc:
	@have=$$(runc --version 2>/dev/null | sed -n 's/^runc version \([0-9][0-9.]*\).*/\1/p'); \
	if [ -n "$$have" ] && [ "$$(printf '%s\n%s\n' "$(RUNC_VERSION)" "$$have" | sort -V | head -1)" = "$(RUNC_VERSION)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "runc $${have:-missing}: want $(RUNC_VERSION) or newer (as root: make deps)"; exit 1; fi; \
	echo "installing: runc $(RUNC_VERSION) (found: $${have:-none})"; \
	if ! dpkg -s libseccomp-dev gcc >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libseccomp-dev gcc libc6-dev pkg-config >/dev/null; \
	fi; \
	CGO_ENABLED=1 GOBIN=/usr/local/bin $(GO) install -tags seccomp github.com/opencontainers/runc@v$(RUNC_VERSION); \
	hash -r; now=$$(runc --version 2>/dev/null | sed -n 's/^runc version \([0-9][0-9.]*\).*/\1/p'); \
	if [ "$$now" != "$(RUNC_VERSION)" ]; then echo "runc $(RUNC_VERSION) is in /usr/local/bin, but PATH finds $$(command -v runc) ($$now) first"; exit 1; fi; \
	echo "runc $$now: $$(command -v runc)"

build:
	$(GO) build ./...

test: deps
	$(GO) test $(TESTFLAGS) -timeout 35m $(PKGS)

test-race:
	$(MAKE) test TESTFLAGS="-race $(TESTFLAGS)"

# lint fails when go.mod or go.sum is not what `go mod tidy` would write
# (go mod tidy -diff prints the difference and exits non-zero).
lint:
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# -p 1: one package's benchmarks at a time, so no baseline is measured while
# another package's benchmark holds the cores. The run is kept in .bench.out;
# its targets (testenv.Target's lines) are summed up at the end.
BENCHCMD = $(GO) test -p 1 -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 30m $(PKGS)
bench: deps
	@echo "$(BENCHCMD)"
	@{ $(BENCHCMD) 2>&1; echo $$? > .bench.rc; } | tee .bench.out
	@echo; echo "Targets: $$(grep -c ': MET$$' .bench.out) met, $$(grep -c ': NOT MET$$' .bench.out) not met ($$(uptime | sed 's/.*load/load/'))"
	@awk '/^pkg: /{ p = $$2; sub(/^github.com\/alineo-labs\/alineo\/?/, "", p); if (p == "") p = "alineo" } \
	  /target: .*MET$$/{ sub(/^.*target: /, ""); print "  " p ": " $$0 }' .bench.out
	@exit $$(cat .bench.rc)

# The SDK tour (a sandbox, a streamed command, a file, the ledger), then the fleet:
# a job with a checkpoint, its executor killed mid-job, a second one taking over.
# On a terminal the dashboard stays up until Enter or Ctrl-C; without one (CI)
# the demo exits and prints the command that reopens the dashboard on its data
# (kept under ./.alineo/demo).
demo: deps
	$(GO) run ./cmd/demo
	$(GO) run ./cmd/executor demo

clean:
	rm -rf .alineo alineo.db alineo.db-wal alineo.db-shm bin

# The chaos soak (cmd/soak, cmd/soak/internal/soak): the binaries as real
# processes across 3 hosts. Each host is a network namespace on a bridge
# running its own sandboxd and 2 executors; the 3 NATS nodes (R3 streams),
# Postgres, an S3 server (versitygw) and the services (the projector as 2
# partitions, the API, 20 SSE auditors) run in namespaces of their own, all
# on 198.18.0.0/24 (the range reserved for network tests). The hosts share
# a checkpoint store (Postgres) and a bucket through sandboxd's
# --checkpoints and --blobs (SOAK_HOSTS_STORAGE = -shared-storage=false
# keeps each host's snapshots on its own disk). A job load runs under a
# seeded fault schedule: kill -9 an executor, a NATS node or the stream
# leader, a projector partition; SIGSTOP an executor; drop an auditor;
# stop Postgres; kill -9 every process of a host (back after -host-down),
# a host's link down past the lease, a NATS node's link down, the S3 server
# stopped. It ends in a table of 12 checks; non-zero exit when one fails
# (the table names the seed: SOAK_FLAGS="-seed N" repeats the schedule;
# `go run ./cmd/soak recheck DIR` reruns the checks of the stream and the
# jobs' statuses on the NATS stores a failed run kept, printing every
# problem). Every namespace, link and mount is removed at the end, after a
# failure or a signal too (a janitor process does it if the soak dies).
# Ctrl-C (or SIGTERM) stops it at once in any phase. Runs as root from the
# module's root.
#
# soak submits jobs for SOAK_DURATION (and races the volume swap first,
# soak-volumes); soak-ci (.ci/run) runs 150 jobs spread over 3 minutes,
# about 4 minutes with its start and checks. soak-1host and soak-1host-ci
# are the same fleet on one host (no namespaces: 4 executors, one
# sandboxd).
SOAK_DURATION ?= 10m
SOAK_FLAGS    ?=
SOAK_HOSTS_STORAGE ?=
VERSITYGW_VERSION ?= v1.8.0
soak: deps deps-soak-hosts soak-volumes
	$(GO) run ./cmd/soak -hosts 3 -duration $(SOAK_DURATION) $(SOAK_HOSTS_STORAGE) $(SOAK_FLAGS)

soak-ci: deps deps-soak-hosts
	$(GO) run ./cmd/soak -hosts 3 -jobs 150 -duration 3m -host-down 10s -partition 12s -fault-every 3s $(SOAK_HOSTS_STORAGE) $(SOAK_FLAGS)

soak-1host: deps
	$(GO) run ./cmd/soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)

soak-1host-ci: deps
	$(GO) run ./cmd/soak -jobs 200 -duration 3m $(SOAK_FLAGS)

# soak-volumes races sandbox creates against a sandbox that swaps a shared
# volume's directory for a link to / (issue 41's F1) for SOAK_RACE_SECONDS
# (make test runs the same test for 20 s).
SOAK_RACE_SECONDS ?= 300
soak-volumes: deps
	SANDBOXD_RACE_SECONDS=$(SOAK_RACE_SECONDS) $(GO) test -count=1 -timeout 30m -run '^TestVolumeSwapRace$$' ./sandboxd/

deps-soak-hosts: deps-net
	@if ! command -v versitygw >/dev/null 2>&1 && [ ! -x /usr/local/bin/versitygw ]; then \
	  echo "installing: versitygw $(VERSITYGW_VERSION)"; \
	  GOBIN=/usr/local/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	fi

# make test under -race 5 times (RUNS) in a row beside two CPU-bound
# processes; logs in LOGDIR (default /tmp/alineo-race-stress).
test-race-stress: deps
	cmd/soak/internal/soak/race-stress.sh
