package opensandbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

// A sandbox from create to delete: run a command, read its output events and exit
// code, copy a file in and out.
func Example() {
	ctx := context.Background()
	c, err := opensandbox.New(opensandbox.Config{
		BaseURL: os.Getenv("OPEN_SANDBOX_URL"), // e.g. http://localhost:8080/v1
		APIKey:  os.Getenv("OPEN_SANDBOX_API_KEY"),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	sb, err := c.CreateSandbox(ctx, opensandbox.CreateSandboxRequest{
		Image:          &opensandbox.ImageSpec{URI: "host"},
		Entrypoint:     []string{"tail", "-f", "/dev/null"},
		ResourceLimits: map[string]string{"cpu": "500m", "memory": "512Mi"},
		Timeout:        10 * time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := c.WaitRunning(wctx, sb.ID); err != nil {
		fmt.Println(err) // a *StateError wrapping ErrSandboxFailed carries the reason
		return
	}
	ex, err := c.Execd(ctx, sb.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close() // cancels any stream still open

	stream, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hello; exit 3"})
	if err != nil {
		fmt.Println(err) // *APIError: the command could not start
		return
	}
	defer stream.Close()
	for stream.Next() {
		if ev := stream.Event(); ev.Kind == opensandbox.EventStdout {
			fmt.Println("stdout:", ev.Text)
		}
	}
	if err := stream.Err(); err != nil {
		fmt.Println(err) // *StreamError, e.g. ErrStreamTruncated: never a silent exit 0
		return
	}
	res, _ := stream.Result()
	fmt.Println("exit code:", res.ExitCode)

	if err := ex.UploadFile(ctx, "/tmp/a.txt", strings.NewReader("hi"), opensandbox.Permission{Mode: 0o644}); err != nil {
		fmt.Println(err)
	}
}
