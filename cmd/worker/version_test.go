package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
		if code != 0 || !strings.HasPrefix(out.String(), "claimfirst worker ") || !strings.Contains(out.String(), "commit ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want the version and commit", args, code, out.String(), errOut.String())
		}
	}
}
