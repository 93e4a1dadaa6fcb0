# The worker as a container image: a static binary on distroless, non-root,
# running `worker run` (the long-polling SQS consumer). Configuration is the
# environment (QUEUE_URL, CLAIM_TABLE, PROVIDER_URL, ...; see README.md).
#
#   docker build -t claimfirst-worker .      (or: make docker)

#
# Base images are pinned by digest (a tag can be moved to other content; a
# digest cannot). To update one, read the tag's current index digest, e.g.
#   docker buildx imagetools inspect golang:1.26 --format '{{.Manifest.Digest}}'
#   crane digest gcr.io/distroless/static-debian12:nonroot
# and replace the sha256 below. The Go release the binary is built with is
# go.mod's toolchain line, whatever 1.26 patch the build image carries
# (GOTOOLCHAIN=auto fetches it through the module proxy).

FROM --platform=$BUILDPLATFORM golang:1.26@sha256:595c7847cff97c9a9e76f015083c481d26078f961c9c8dca3923132f51fe12f1 AS build
ENV GOTOOLCHAIN=auto
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
	go build -trimpath -ldflags "-s -w" -o /out/worker ./cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/worker /worker
USER nonroot:nonroot
ENTRYPOINT ["/worker"]
CMD ["run"]
