package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PromtoolInstall is the command that installs promtool where FindPromtool
// looks (make deps runs it when promtool is missing).
const PromtoolInstall = "GOBIN=/usr/local/bin go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0"

// FindPromtool returns the path of Prometheus's promtool: $PROMTOOL, else
// promtool on PATH, in /usr/local/bin or in $GOPATH/bin.
func FindPromtool() (string, error) {
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p, nil
	}
	cands := []string{"/usr/local/bin/promtool"}
	if gp := os.Getenv("GOPATH"); gp != "" {
		cands = append(cands, filepath.Join(gp, "bin", "promtool"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, "go", "bin", "promtool"))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	return "", errors.New("promtool not found")
}

// PromtoolCheck runs `promtool check metrics` on exposition (a /metrics
// answer in the text format) and fails t with what it reports: a metric
// that breaks Prometheus's naming and type conventions (promtool's lint).
// Without promtool it skips t with the command that installs it, or fails
// t when CI=true.
func PromtoolCheck(t testing.TB, exposition string) {
	t.Helper()
	bin, err := FindPromtool()
	if err != nil {
		SkipOrFail(t, fmt.Sprintf("%v (install it: make deps, or %s)", err, PromtoolInstall))
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}
