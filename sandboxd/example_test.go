package sandboxd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
)

// An in-process server: start it, create a sandbox over the OpenSandbox API,
// wait for it to run, and close the server (which kills the sandbox).
func Example() {
	ctx := context.Background()
	srv, err := sandboxd.Open(context.Background(), sandboxd.Config{}) // 127.0.0.1:0, temporary data dir
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close(ctx)
	url, err := srv.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}

	body := `{"image":{"uri":"host"},"entrypoint":["tail","-f","/dev/null"],"resourceLimits":{"cpu":"500m","memory":"512Mi"}}`
	res, err := http.Post(url+"/v1/sandboxes", "application/json", strings.NewReader(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	var sb sandboxd.Sandbox
	err = json.NewDecoder(res.Body).Decode(&sb)
	res.Body.Close()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.StatusCode, sb.Status.State)

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		res, err := http.Get(url + "/v1/sandboxes/" + sb.ID)
		if err != nil {
			fmt.Println(err)
			return
		}
		err = json.NewDecoder(res.Body).Decode(&sb)
		res.Body.Close()
		if err != nil || sb.Status.State != sandboxd.StatePending {
			break
		}
	}
	fmt.Println(sb.Status.State)
	// Output:
	// 202 Running
	// Running
}
