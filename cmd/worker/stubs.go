package main

import (
	"context"
	"errors"
)

// The subcommands below are being built; each moves to its own file.

func cmdLambda(ctx context.Context, io stdio) error {
	return errors.New("lambda: not built yet")
}
