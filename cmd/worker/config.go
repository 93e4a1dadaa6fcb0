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
//
// An environment value is applied after parsing, never made the flag's
// default: usage text (-h, or any flag error) shows the built-in defaults
// only, so that a value set in the environment (an API key, a URL with a
// password) never reaches stderr and the container's logs.
type settings struct {
	fs     *flag.FlagSet
	getenv func(string) string
	stdout io.Writer // where -h prints the flags
	errs   []error
	// fromEnv sets each flag that has an environment value to it, by flag
	// name; applyEnv runs those of the flags not given on the command line.
	fromEnv map[string]func()
}

func newSettings(name string, io stdio) *settings {
	fs := flag.NewFlagSet("worker "+name, flag.ContinueOnError)
	fs.SetOutput(io.stderr)
	return &settings{fs: fs, getenv: io.getenv, stdout: io.stdout, fromEnv: make(map[string]func())}
}

// applyEnv gives each flag not set on the command line its environment
// value, once parsing is done.
func (s *settings) applyEnv() {
	set := make(map[string]bool)
	s.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, apply := range s.fromEnv {
		if !set[name] {
			apply()
		}
	}
}

func (s *settings) describe(env, usage string) string {
	if env == "" {
		return usage
	}
	return usage + " (env " + env + ")"
}

// String defines a string setting.
func (s *settings) String(flagName, env, def, usage string) *string {
	p := s.fs.String(flagName, def, s.describe(env, usage))
	fromEnv(s, p, flagName, env, func(e string) (string, error) { return e, nil }, "")
	return p
}

// Secret defines a setting whose value is a secret (an API key): it has
// no default, and no usage text, error or log line shows its value.
func (s *settings) Secret(flagName, env, usage string) *secret {
	p := new(secret)
	s.fs.Var(p, flagName, s.describe(env, usage))
	fromEnv(s, p, flagName, env, func(e string) (secret, error) { return secret(e), nil }, "")
	return p
}

// Int defines an integer setting.
func (s *settings) Int(flagName, env string, def int, usage string) *int {
	p := s.fs.Int(flagName, def, s.describe(env, usage))
	fromEnv(s, p, flagName, env, strconv.Atoi, "an integer")
	return p
}

// Float defines a floating-point setting.
func (s *settings) Float(flagName, env string, def float64, usage string) *float64 {
	p := s.fs.Float64(flagName, def, s.describe(env, usage))
	fromEnv(s, p, flagName, env, func(e string) (float64, error) { return strconv.ParseFloat(e, 64) }, "a number")
	return p
}

// Duration defines a Go duration setting ("30s", "96h").
func (s *settings) Duration(flagName, env string, def time.Duration, usage string) *time.Duration {
	p := s.fs.Duration(flagName, def, s.describe(env, usage))
	fromEnv(s, p, flagName, env, time.ParseDuration, "a Go duration such as 30s or 96h")
	return p
}

// Bool defines a boolean setting.
func (s *settings) Bool(flagName, env string, def bool, usage string) *bool {
	p := s.fs.Bool(flagName, def, s.describe(env, usage))
	fromEnv(s, p, flagName, env, strconv.ParseBool, "a boolean")
	return p
}

// fromEnv parses env's value, if it is set, for applyEnv to give the flag
// at p after parsing; a value that does not parse is recorded for Parse to
// report, naming the variable.
func fromEnv[T any](s *settings, p *T, flagName, env string, parse func(string) (T, error), what string) {
	e := s.envValue(env)
	if e == "" {
		return
	}
	v, err := parse(e)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s (-%s) %q: not %s", env, flagName, e, what))
		return
	}
	s.fromEnv[flagName] = func() { *p = v }
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
	s.applyEnv()
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
