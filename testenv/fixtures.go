package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FixturesEnv names a folder holding the shared fixtures, for a checkout
// without ../shared beside it.
const FixturesEnv = "ALINEO_FIXTURES"

// FixturesDir returns the folder of the shared fixtures: $ALINEO_FIXTURES when
// set, else ../shared/fixtures relative to the repository root (the folder
// holding go.mod, found from the working directory upwards). Without one it
// skips t (fails it when CI=true).
func FixturesDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(FixturesEnv); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			SkipOrFail(t, "no go.mod above the working directory, so no ../shared/fixtures (set "+FixturesEnv+")")
		}
		dir = parent
	}
	d := filepath.Join(dir, "..", "shared", "fixtures")
	if _, err := os.Stat(d); err != nil {
		SkipOrFail(t, "fixtures not found: "+err.Error()+" (set "+FixturesEnv+" to the fixtures folder)")
	}
	return d
}

// Fixture copies the fixture at rel (a path under FixturesDir, such as
// "typescript-sdk/session.db") into a folder of t's and returns the copy's
// path: a store migrates what it opens, so a test never opens the fixture
// itself.
func Fixture(t testing.TB, rel string) string {
	t.Helper()
	src := filepath.Join(FixturesDir(t), filepath.FromSlash(rel))
	b, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		SkipOrFail(t, "fixture "+rel+" not found in "+filepath.Dir(src))
	}
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
