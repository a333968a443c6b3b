package alineo_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

func ExampleSandbox_Record() {
	ctx := context.Background()
	store := memory.New()
	client, err := alineo.New(alineo.Options{BaseURL: exampleServerURL(), Adapter: store})
	if err != nil {
		log.Fatal(err)
	}
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "agent"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	// An agent's own events go to the same ledger, in order with the execs.
	if err := sb.Record(ctx, "ext.permission_requested", map[string]string{"tool": "bash"}); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Exec(ctx, "echo approved").Wait(); err != nil {
		log.Fatal(err)
	}
	if err := sb.Record(ctx, "ext.turn_checkpoint", map[string]int{"turn": 1}); err != nil {
		log.Fatal(err)
	}
	// A name in a reserved namespace is refused, and nothing is written.
	fmt.Println(sb.Record(ctx, "exec.approved", nil))

	es, err := store.ReadAll(ctx, "agent", sb.ID())
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range es {
		if e.Event.Extension() {
			fmt.Println(e.StepIndex, e.Event, string(e.Payload))
		}
	}
	// Output:
	// invalid ledger entry: event: unknown event "exec.approved": the namespace "exec" is reserved
	// -1 ext.permission_requested {"tool":"bash"}
	// -1 ext.turn_checkpoint {"turn":1}
}

// A program without a sandbox appends extension events to the ledger itself:
// events.NewExtension builds and checks the entry, the store's Append writes it.
func Example_extensionEventWithoutSandbox() {
	ctx := context.Background()
	store := memory.New()
	e, err := events.NewExtension(time.Now().UnixMilli(), "planner", "run-42", events.SandboxLevel,
		"workflow_complete", map[string]string{"result": "ok"})
	if err != nil {
		log.Fatal(err) // a *events.ValidationError: nothing to write
	}
	if err := store.Append(ctx, e); err != nil {
		log.Fatal(err)
	}
	es, err := store.ReadAll(ctx, "planner", "run-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(es[0].Event, string(es[0].Payload))

	_, err = events.NewExtension(time.Now().UnixMilli(), "planner", "run-42", events.SandboxLevel, "Workflow Complete", nil)
	fmt.Println(err)
	// Output:
	// workflow_complete {"result":"ok"}
	// invalid ledger entry: event: event name "Workflow Complete" does not start with a lowercase letter
}
