package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// FindTool returns the path of the program name as make deps installs the
// test servers and tools (go install, into /usr/local/bin or $GOPATH/bin):
// on PATH, else in /usr/local/bin, $GOPATH/bin or ~/go/bin.
func FindTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	cands := []string{filepath.Join("/usr/local/bin", name)}
	if gp := os.Getenv("GOPATH"); gp != "" {
		cands = append(cands, filepath.Join(gp, "bin", name))
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, "go", "bin", name))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// LinkedPackages returns the import paths of every package the package in
// the current directory links (`go list -deps .`), the standard library's
// included; it fails t if go list fails.
func LinkedPackages(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	return strings.Fields(string(out))
}

// BuildStatic builds the package pkg (an import path, or a directory such as
// ".") into the file out, statically linked (CGO_ENABLED=0, as the Makefile
// builds every binary); its error carries go build's output.
func BuildStatic(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}
