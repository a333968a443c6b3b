package streammsg

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestAPIPrefix(t *testing.T) {
	nc := &nats.Conn{Opts: nats.GetDefaultOptions()}
	newJS := func(f func() (jetstream.JetStream, error)) jetstream.JetStream {
		js, err := f()
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	tests := []struct {
		name string
		js   jetstream.JetStream
		want string
	}{
		{"default", newJS(func() (jetstream.JetStream, error) { return jetstream.New(nc) }), "$JS.API."},
		{"domain", newJS(func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "hub") }), "$JS.hub.API."},
		{"prefix", newJS(func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.imported.API") }), "$JS.imported.API."},
		{"prefix with its dot", newJS(func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$X.API.") }), "$X.API."},
	}
	for _, tt := range tests {
		if got := APIPrefix(tt.js); got != tt.want {
			t.Errorf("%s: APIPrefix = %q, want %q", tt.name, got, tt.want)
		}
	}
}
