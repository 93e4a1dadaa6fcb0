package integration

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileBasesPinned: every base image of the container build is
// pinned by digest, so a moved tag cannot change what is built, and the
// build stage lets go.mod's toolchain line choose the Go release.
func TestDockerfileBasesPinned(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`@sha256:[0-9a-f]{64}(\s|$)`)
	froms := 0
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			continue
		}
		froms++
		if !pinned.MatchString(line) {
			t.Errorf("base image not pinned by digest: %s", strings.TrimSpace(line))
		}
	}
	if froms == 0 {
		t.Fatal("no FROM line in the Dockerfile")
	}
	if !strings.Contains(string(b), "ENV GOTOOLCHAIN=auto") {
		t.Error("the build stage does not set GOTOOLCHAIN=auto: an image's own Go would build the binary, not go.mod's toolchain")
	}
}
