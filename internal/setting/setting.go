// Package setting is how the transports' configuration validation reports
// a refused setting: one *Error per bad field, joined under ErrConfig, so
// that the binary can name each setting as its user knows it (an
// environment variable, a flag) with Errors. A program of its own needs
// none of it: errors.Is(err, worker.ErrConfig) and the error's text say
// the same.
package setting

import (
	"errors"
	"fmt"
)

// ErrConfig marks a configuration the worker refuses to start with; the
// binary exits with status 2 on it. It is worker.ErrConfig.
var ErrConfig = errors.New("worker: bad configuration")

// Error is a setting a configuration refuses.
type Error struct {
	// Field is the configuration field, as named in worker.Protocol or the
	// transport's configuration (sqsworker.Config, ...).
	Field string
	// Value is the refused value; nil for a missing one.
	Value any
	// Problem says what is wrong with it.
	Problem string
}

// Error implements error: "Field Value: Problem", or "Field Problem"
// for a missing one.
func (e *Error) Error() string {
	if e.Value == nil {
		return e.Field + " " + e.Problem
	}
	return fmt.Sprintf("%s %v: %s", e.Field, e.Value, e.Problem)
}

// Errors returns the *Errors err joins (in order), none when err holds
// none.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(e error) {
		if fe, ok := e.(*Error); ok { //nolint:errorlint // this walk is the unwrapping
			out = append(out, fe)
			return
		}
		switch u := e.(type) { //nolint:errorlint // this walk is the unwrapping
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// Join joins errs (*Errors, usually) under ErrConfig; nil when there are
// none.
func Join(errs ...error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}
