// Package awstest gives tests an AWS configuration for the emulator that
// `make test` starts (emulator/with-emulator.sh), and skips those tests with
// a message saying how to run them when there is none.
package awstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// RequiredEnv is set by the emulator launcher; when it is set a test that
// cannot reach the emulator fails instead of skipping.
const RequiredEnv = "CLAIMFIRST_EMULATOR"

// Config returns the SDK configuration from the standard chain, for tests
// that talk to SQS and DynamoDB over the wire. Without AWS_ENDPOINT_URL it
// skips the test (or fails it under `make test`), so that `go test ./...`
// never reaches real AWS by accident.
func Config(tb testing.TB) aws.Config {
	tb.Helper()
	if os.Getenv("AWS_ENDPOINT_URL") == "" {
		if os.Getenv(RequiredEnv) != "" {
			tb.Fatalf("%s is set but AWS_ENDPOINT_URL is not: the emulator launcher did not export it", RequiredEnv)
		}
		tb.Skip("needs the emulator: run `make test`, or `make emulator` and export the AWS_ENDPOINT_URL it prints")
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		tb.Fatalf("load AWS config: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg
}

// Name returns a unique resource name with the given prefix.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
