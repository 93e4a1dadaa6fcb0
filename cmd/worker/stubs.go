package main

import (
	"context"
	"errors"
)

// The subcommands below are being built; each moves to its own file.

func cmdRun(ctx context.Context, args []string, io stdio) error {
	return errors.New("run: not built yet")
}

func cmdDemo(ctx context.Context, args []string, io stdio) error {
	return errors.New("demo: not built yet")
}

func cmdProvider(ctx context.Context, args []string, io stdio) error {
	return errors.New("provider: not built yet")
}

func cmdSetup(ctx context.Context, args []string, io stdio) error {
	return errors.New("setup: not built yet")
}

func cmdLambda(ctx context.Context, io stdio) error {
	return errors.New("lambda: not built yet")
}
