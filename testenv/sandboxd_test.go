package testenv_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/egress"
	"github.com/alineo-labs/alineo/testenv"
)

var _ egress.Resolver = testenv.LoopbackHosts(nil)

func TestLoopbackHosts(t *testing.T) {
	h := testenv.LoopbackHosts{"allowed.test", "Other.Test"}
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"allowed.test", true}, {"ALLOWED.test.", true}, {"other.test", true},
		{"sub.allowed.test", false}, {"example.com", false}, {"", false},
	} {
		got, err := h.LookupNetIP(context.Background(), "ip", c.host)
		if !c.ok {
			var de *net.DNSError
			if !errors.As(err, &de) || !de.IsNotFound {
				t.Errorf("LookupNetIP(%q) = %v, %v; want a not-found DNSError", c.host, got, err)
			}
			continue
		}
		if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("LookupNetIP(%q) = %v, %v; want [127.0.0.1]", c.host, got, err)
		}
	}
}
