# The two commands of the README: `make run` and `make test`. Both make sure
# a PostgreSQL answers at DATABASE_URL first, starting a private one from the
# system's binaries when nothing does (scripts/ensure-postgres).
#
# bin/chargeflow is the laboratory's build (-tags lab): the product's roles
# plus the fake provider, the scenarios, the benchmark, `all`, crash points
# and the negative control. The Dockerfile builds the product without the
# tag (docs/architecture.md, "The laboratory apart").

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/chargeflow?sslmode=disable

GO ?= go
# How many inputs `make test` fuzzes the canonical-JSON parser with, and each
# of the two HTTP targets against a real database: POST /v1/charges
# (api/fuzz_test.go) and the operator's routes and page forms
# (opsplane/fuzz_test.go). A count, not a duration: Go 1.26's fuzzing
# coordinator can report its own -fuzztime deadline as a failure
# ("context deadline exceeded", no crasher) when a worker is busy
# minimizing as the time runs out; a count has no deadline to race.
FUZZTIME ?= 200000x
FUZZTIME_HTTP ?= 3000x

.PHONY: run test scenarios bench db

## db: make sure PostgreSQL answers at DATABASE_URL (start a private cluster if not)
db:
	@scripts/ensure-postgres

## run: the whole system on this machine, with a demo tenant and a ready curl
run: db
	$(GO) build -tags lab -buildvcs=auto -o bin/chargeflow ./cmd/chargeflow
	exec bin/chargeflow all

## test: formatting, vet and build of the product and the lab builds, every test with -race and
## -tags lab (a headless Chromium drives the operator's page,
## and stripe-mock validates the Stripe adapter's requests),
## short fuzz runs, the bootstrap scripts' own tests, and the crash-scenario catalogue with short
## timings (a 2,000-charge soak and a failover of PostgreSQL under pg_auto_failover included)
## promtool checks the alert rules and Prometheus's configuration under deploy/ and runs the rules' unit tests
test: db
	@scripts/ensure-docker-compose
	@scripts/ensure-chromium
	@scripts/ensure-stripe-mock >/dev/null
	@scripts/ensure-promtool
	promtool check rules deploy/prometheus/alerts.yml
	promtool check config deploy/prometheus/prometheus.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	@unformatted=$$(gofmt -l .); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags lab ./...
	$(GO) build ./...
	$(GO) test -tags lab -race -count=1 ./...
	$(GO) test -run='^$$' -fuzz=FuzzCanonical -fuzztime=$(FUZZTIME) ./api/jsoncanon/
	$(GO) test -run='^$$' -fuzz='^FuzzCreateCharge$$' -fuzztime=$(FUZZTIME_HTTP) ./api/
	$(GO) test -run='^$$' -fuzz='^FuzzOperatorRoutes$$' -fuzztime=$(FUZZTIME_HTTP) ./opsplane/
	scripts/ensure-postgres_test.sh
	scripts/ha-postgres_test.sh
	scripts/ensure-stripe-mock_test.sh
	scripts/ensure-promtool_test.sh
	$(GO) build -tags lab -buildvcs=auto -o bin/chargeflow ./cmd/chargeflow
	bin/chargeflow scenario run all --short --parallel 2
	bin/chargeflow scenario run all --short --parallel 2 --psp stripe

## bench: measure the performance targets as ratios against baselines on a
## fresh database (docs/benchmarks.md); BENCHFLAGS adds flags, e.g. --json
bench: db
	$(GO) build -tags lab -buildvcs=auto -o bin/chargeflow ./cmd/chargeflow
	bin/chargeflow bench $(BENCHFLAGS)

## scenarios: the full catalogue, with the 10,000-charge soaks (one with two APIs and a failover)
scenarios: db
	$(GO) build -tags lab -buildvcs=auto -o bin/chargeflow ./cmd/chargeflow
	bin/chargeflow scenario run all --parallel 2
	bin/chargeflow scenario run all --parallel 2 --psp stripe
