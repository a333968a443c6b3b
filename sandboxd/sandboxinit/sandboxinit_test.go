package sandboxinit_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/sandboxinit"
)

// mainEnv makes the test binary run sandboxinit.Main, as cmd/sandboxd-init.
const mainEnv = "ALINEO_SANDBOXINIT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		sandboxinit.Main()
	}
	sandboxinit.RunRole()
	os.Exit(m.Run())
}

// self runs this test binary with env.
func self(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = env
	return cmd
}

// TestIdentify: the program answers sandboxd's identify role with its
// protocol and build.
func TestIdentify(t *testing.T) {
	out, err := self(t, "ALINEO_SANDBOXD_INIT=identify").Output()
	if err != nil {
		t.Fatalf("identify: %v", err)
	}
	var id struct {
		Protocol int
		Build    string
	}
	if err := json.Unmarshal(out, &id); err != nil || id.Protocol < 1 || !strings.HasPrefix(id.Build, "github.com/alineo-labs/alineo@") {
		t.Errorf("identify answered %q (%v); want a protocol and this module's build", out, err)
	}
}

// TestMainAlone: run by a user, without a role, Main says what it is and
// exits 2; an unknown role is refused too.
func TestMainAlone(t *testing.T) {
	for _, env := range [][]string{{mainEnv + "=1"}, {mainEnv + "=1", "ALINEO_SANDBOXD_INIT=nonsense"}} {
		out, err := self(t, env...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "sandbox") {
			t.Errorf("%v: %v, output %q; want exit 2 and a message", env, err, out)
		}
	}
}
