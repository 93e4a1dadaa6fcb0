# The worker as a container image: a static binary on distroless, non-root,
# running `worker run` (the long-polling SQS consumer). Configuration is the
# environment (QUEUE_URL, CLAIM_TABLE, PROVIDER_URL, ...; see README.md).
#
#   docker build -t claimfirst-worker .      (or: make docker)

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
	go build -trimpath -ldflags "-s -w" -o /out/worker ./cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /worker
USER nonroot:nonroot
ENTRYPOINT ["/worker"]
CMD ["run"]
