// Package integration holds the end-to-end tests: real worker processes
// (the built binary), SQS and DynamoDB over the wire on the emulator that
// `make test` starts, and the fake payment provider. It has no non-test code.
package integration
