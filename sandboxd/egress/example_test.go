package egress_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

// A deny-by-default proxy with one allow rule, changed at runtime through the
// egress API the way the SDK does it.
func Example() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hi")
	}))
	defer upstream.Close()

	p, err := egress.New(egress.Config{
		Name:  "sbx-1",
		Token: "egress-token",
		Policy: &egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{
			{Action: egress.Allow, Target: "127.0.0.1"},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go p.Serve(l)                          // the sandbox's only way out
	api := httptest.NewServer(p.Handler()) // port 18080 in OpenSandbox
	defer api.Close()

	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})}}
	status := func() int {
		resp, err := client.Get(upstream.URL)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println("allowed:", status())

	req, _ := http.NewRequest("PATCH", api.URL+"/policy", strings.NewReader(`[{"action":"deny","target":"127.0.0.0/8"}]`))
	req.Header.Set(egress.AuthHeader, "egress-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("after PATCH:", status())
	// Output:
	// allowed: 200
	// after PATCH: 403
}
