package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// FixturesDir returns the module's folder of fixtures, testdata/ beside
// go.mod (found from the working directory upwards; testdata/README.md says
// what each fixture holds and how to regenerate them). A test binary runs in
// its package's folder, so every package finds the same folder.
func FixturesDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above %s: a test of this module runs in the module's tree", dir)
		}
		dir = parent
	}
}

// Fixture copies the fixture at rel (a path under FixturesDir, such as
// "typescript-sdk/session.db") into a folder of t's and returns the copy's
// path: a store migrates what it opens, so a test never opens the fixture
// itself.
func Fixture(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(FixturesDir(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(rel))
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
