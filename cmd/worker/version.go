package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
)

// cmdVersion prints the module's version and the commit the binary was
// built from, as the Go toolchain recorded them.
func cmdVersion(_ context.Context, args []string, io stdio) error {
	if len(args) > 0 {
		return usagef("version takes no arguments, got %q", args[0])
	}
	fmt.Fprintln(io.stdout, versionLine())
	return nil
}

// versionLine is "claimfirst worker VERSION (commit REV[, modified], built
// with GO)" from the binary's build information.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "claimfirst worker (no build information)"
	}
	version := cmp.Or(bi.Main.Version, "(devel)")
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	return fmt.Sprintf("claimfirst worker %s %s (commit %s%s, %s)", bi.Main.Path, version, cmp.Or(rev, "unknown"), modified, bi.GoVersion)
}
