package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// usageError is a bad flag, setting or argument: exit status 2, one line.
type usageError struct {
	msg    string
	silent bool // already reported (the flag package printed it)
}

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// settings is a flag set whose flags default to environment variables: each
// flag -name has the environment variable ENV_NAME, and a flag given on the
// command line wins. Bad values name the variable and the flag.
type settings struct {
	fs     *flag.FlagSet
	getenv func(string) string
	stdout io.Writer // where -h prints the flags
	errs   []error
}

func newSettings(name string, io stdio) *settings {
	fs := flag.NewFlagSet("worker "+name, flag.ContinueOnError)
	fs.SetOutput(io.stderr)
	return &settings{fs: fs, getenv: io.getenv, stdout: io.stdout}
}

func (s *settings) describe(env, usage string) string {
	if env == "" {
		return usage
	}
	return usage + " (env " + env + ")"
}

// String defines a string setting.
func (s *settings) String(flagName, env, def, usage string) *string {
	v := def
	if e := s.envValue(env); e != "" {
		v = e
	}
	return s.fs.String(flagName, v, s.describe(env, usage))
}

// Int defines an integer setting.
func (s *settings) Int(flagName, env string, def int, usage string) *int {
	return s.fs.Int(flagName, fromEnv(s, flagName, env, def, strconv.Atoi, "an integer"), s.describe(env, usage))
}

// Float defines a floating-point setting.
func (s *settings) Float(flagName, env string, def float64, usage string) *float64 {
	parse := func(e string) (float64, error) { return strconv.ParseFloat(e, 64) }
	return s.fs.Float64(flagName, fromEnv(s, flagName, env, def, parse, "a number"), s.describe(env, usage))
}

// Duration defines a Go duration setting ("30s", "96h").
func (s *settings) Duration(flagName, env string, def time.Duration, usage string) *time.Duration {
	v := fromEnv(s, flagName, env, def, time.ParseDuration, "a Go duration such as 30s or 96h")
	return s.fs.Duration(flagName, v, s.describe(env, usage))
}

// Bool defines a boolean setting.
func (s *settings) Bool(flagName, env string, def bool, usage string) *bool {
	return s.fs.Bool(flagName, fromEnv(s, flagName, env, def, strconv.ParseBool, "a boolean"), s.describe(env, usage))
}

// fromEnv returns env's value parsed, or def if env is unset; a value that
// does not parse is recorded for Parse to report, naming the variable.
func fromEnv[T any](s *settings, flagName, env string, def T, parse func(string) (T, error), what string) T {
	e := s.envValue(env)
	if e == "" {
		return def
	}
	v, err := parse(e)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s (-%s) %q: not %s", env, flagName, e, what))
		return def
	}
	return v
}

func (s *settings) envValue(env string) string {
	if env == "" {
		return ""
	}
	return s.getenv(env)
}

// Parse parses args and returns a usage error for the first bad setting.
func (s *settings) Parse(args []string) error {
	if len(s.errs) > 0 {
		return usageError{msg: s.errs[0].Error()}
	}
	s.helpToStdout(args)
	if err := s.fs.Parse(args); err != nil {
		return parseError(err)
	}
	if s.fs.NArg() > 0 {
		return usagef("unexpected argument %q", s.fs.Arg(0))
	}
	return nil
}

// errHelp means -h was asked for and answered: exit status 0.
var errHelp = errors.New("help requested")

// parseError turns the flag package's error, which it has printed, into
// errHelp or a silent usage error.
func parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	return usageError{msg: err.Error(), silent: true}
}

// helpToStdout sends the flags' help to stdout when args ask for it, so
// that `worker run -h | less` works; errors stay on stderr.
func (s *settings) helpToStdout(args []string) {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--h", "--help":
			s.fs.SetOutput(s.stdout)
			return
		case "--":
			return
		}
	}
}

// require returns a usage error naming env and flag if v is empty.
func require(v, flagName, env string) error {
	if strings.TrimSpace(v) == "" {
		return usagef("%s (-%s) is required", env, flagName)
	}
	return nil
}
