package testenv

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
)

// Sandboxd starts an in-process sandboxd on 127.0.0.1:0 with a temporary data
// directory and returns its base URL (without /v1). t.Cleanup closes it, which
// kills every sandbox it started.
//
// Where the kernel refuses namespaces the test is skipped (failed with CI=true);
// ALINEO_SANDBOXD_NO_ISOLATION=1 runs sandboxes as plain host processes instead.
func Sandboxd(t testing.TB) string {
	t.Helper()
	url, _ := SandboxdServer(t, sandboxd.Config{})
	return url
}

// SandboxdServer is Sandboxd with a configuration; it also returns the server.
// An empty cfg.DataDir is a temporary directory; cfg.Listen defaults to
// 127.0.0.1:0.
func SandboxdServer(t testing.TB, cfg sandboxd.Config) (string, *sandboxd.Server) {
	t.Helper()
	if os.Getenv("ALINEO_SANDBOXD_NO_ISOLATION") == "1" {
		cfg.NoIsolation = true
	}
	s, err := sandboxd.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: sandboxd: %v", err)
	}
	url, err := s.Start(context.Background())
	if err != nil {
		_ = s.Close(context.Background())
		if errors.Is(err, sandboxd.ErrIsolationUnavailable) {
			SkipOrFail(t, "sandboxd: "+err.Error()+" (ALINEO_SANDBOXD_NO_ISOLATION=1 runs without isolation)")
		}
		t.Fatalf("testenv: sandboxd: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("testenv: close sandboxd: %v", err)
		}
	})
	return url, s
}

// LoopbackHosts is a resolver for sandboxd.Config.EgressResolver that resolves
// each of its names (any case) to 127.0.0.1 and fails for every other name, so
// that egress tests can allow one test host name and deny another while both
// reach a test server on the host's loopback:
//
//	testenv.SandboxdServer(t, sandboxd.Config{EgressResolver: testenv.LoopbackHosts{"allowed.test", "other.test"}})
type LoopbackHosts []string

// LookupNetIP implements sandboxd/egress.Resolver.
func (h LoopbackHosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(host, ".")
	for _, n := range h {
		if strings.EqualFold(n, host) {
			return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}, nil
		}
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
