package testenv

import (
	"os"
	"testing"
	"time"
)

// CI reports whether the tests run in CI (CI=true). There, a resource that cannot
// be started fails the test instead of skipping it.
func CI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips t with the reason and the command that enables the test, or
// fails it when running in CI.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true: %s", reason)
	}
	t.Skip(reason)
}

// Eventually calls f until it returns nil or timeout passes, and then fails t with
// f's last error. It polls with a short, growing interval; it never just sleeps.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %v: %v", timeout, err)
		}
		time.Sleep(wait)
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}
