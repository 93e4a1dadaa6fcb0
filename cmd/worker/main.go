// Command worker is the claimfirst binary: an SQS, Kafka or RabbitMQ
// consumer with exactly-once effects (run), the experiments that explain it (demo), a fake
// payment provider (provider), and local resource setup (setup). When
// AWS_LAMBDA_RUNTIME_API is set it serves as a Lambda handler for SQS events.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stdio is where a subcommand reads its environment and writes its output.
type stdio struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	summary string
	run     func(ctx context.Context, args []string, io stdio) error
}

func commands() map[string]command {
	return map[string]command{
		"run":      {"consume SQS, Kafka or RabbitMQ (QUEUE_URL, KAFKA_BROKERS or AMQP_URL): claim, charge, complete, ack", cmdRun},
		"demo":     {"reproduce the experiments that show why claims, leases and keys are needed", cmdDemo},
		"provider": {"serve the fake payment provider (honours Idempotency-Key, injects faults)", cmdProvider},
		"setup":    {"create the queue, dead-letter queue and claim table (Kafka's topics, RabbitMQ's topology) for local development", cmdSetup},
		"claims":   {"inspect or repair one claim: get, release, complete, forget", cmdClaims},
		"redrive":  {"move the dead-letter queue's messages back to the queue, on SQS or RabbitMQ (-dry-run counts them by reason)", cmdRedrive},
		"sim":      {"run the simulator's soak: the real worker under seeded faults (needs go and this module's source)", cmdSim},
		"version":  {"print the module version and the commit it was built from", cmdVersion},
	}
}

// run dispatches to a subcommand and returns the process's exit status:
// 0 on success, 2 for bad usage or configuration, 1 for any other failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	io := stdio{getenv: getenv, stdout: stdout, stderr: stderr}
	if getenv("AWS_LAMBDA_RUNTIME_API") != "" && len(args) == 0 {
		return exitCode(cmdLambda(ctx, io), stderr)
	}
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "-version" || args[0] == "--version" {
		args[0] = "version"
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "worker: unknown command %q (try: worker help)\n", args[0])
		return 2
	}
	return exitCode(cmd.run(ctx, args[1:], io), stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, errHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		if !ue.silent {
			// One line, however many problems errors.Join put together.
			fmt.Fprintln(stderr, "worker:", strings.ReplaceAll(unprefixed(ue.Error()), "\n", "; "))
		}
		return 2
	}
	fmt.Fprintln(stderr, "worker:", unprefixed(err.Error()))
	return 1
}

// unprefixed drops the "worker: " the worker package's errors start with,
// which exitCode's own prefix would double.
func unprefixed(msg string) string {
	return strings.TrimPrefix(msg, "worker: ")
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprint(w, `worker: exactly-once effects for an SQS, Kafka or RabbitMQ consumer.

Usage: worker <command> [flags]   (each flag also reads the environment variable shown in its help)

Commands:
`)
	for _, name := range []string{"run", "demo", "provider", "setup", "claims", "redrive", "sim", "version"} {
		fmt.Fprintf(w, "  %-9s %s\n", name, cmds[name].summary)
	}
	fmt.Fprint(w, `
Run "worker <command> -h" for a command's flags. With AWS_LAMBDA_RUNTIME_API set
and no command, the binary serves SQS events as a Lambda function.
`)
}
