# The chargeflow image: one static binary, every role a subcommand, on a
# distroless base as a non-root user. docs/deployment.md says why.
#
#   docker build -t chargeflow:local .
#   docker run --rm chargeflow:local migrate      (ENTRYPOINT is the binary)
#
# The default (last) stage is the product, built without the lab tag: no
# fake provider, scenarios or benchmark, no crash point to arm, no negative
# control. The laboratory's image, for the bundled fake provider only, is
# the stage before it:
#
#   docker build --target lab -t chargeflow-lab:local .

# Source stage: the official Go image, the modules, the source.
FROM golang:1.26-bookworm AS source
WORKDIR /src
# Modules first: a source change reuses this layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .

# Build stage: a static binary (no cgo, so no libc to match at run time),
# without file paths or debug symbols. cmd/chargeflow's product test builds
# it with this very command and checks what it holds.
FROM source AS build
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/bin/chargeflow ./cmd/chargeflow

# The laboratory's build: the same, with -tags lab.
FROM source AS build-lab
RUN CGO_ENABLED=0 go build -tags lab -trimpath -ldflags='-s -w' -o /out/bin/chargeflow ./cmd/chargeflow
# The fake provider's ledger folder, owned by the runtime user: a named
# volume mounted on /data starts as a copy of it, owner included, so the
# non-root process can write its ledger there.
RUN mkdir -p /out/root/data && chown 65532:65532 /out/root/data && chmod 0750 /out/root/data

# The laboratory's image (--target lab): the fake provider by default.
FROM gcr.io/distroless/static-debian12:nonroot AS lab
COPY --from=build-lab /out/bin/chargeflow /usr/local/bin/chargeflow
COPY --from=build-lab --chown=65532:65532 /out/root/ /
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/chargeflow"]
CMD ["fakepsp", "--addr", "0.0.0.0:9090", "--ledger", "/data/ledger.jsonl"]

# Final stage, the product: no shell, no package manager; CA certificates
# and time zones only. Its nonroot user is 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bin/chargeflow /usr/local/bin/chargeflow
# Numeric, so a runtime that checks "runs as non-root" without reading
# /etc/passwd can tell.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/chargeflow"]
CMD ["api", "--addr", "0.0.0.0:8080"]
# There is no curl here: the probe is the binary. It checks the API (the
# default command); docker-compose.yml gives the other roles their own.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
	CMD ["/usr/local/bin/chargeflow", "healthcheck", "--url", "http://127.0.0.1:8080/readyz", "--timeout", "2s"]
