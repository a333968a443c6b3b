package alineo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/alineo-labs/alineo"
)

func ExampleSandbox_ExecInteractive() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)

	// A command on a terminal: what is written is its keyboard input, and
	// every chunk of it is recorded before it is sent.
	term := sb.ExecInteractive(ctx, "read name; echo hello-$name; exit 3")
	if _, err := term.WriteString("world\n"); err != nil {
		log.Fatal(err)
	}
	res, err := term.Wait()
	fmt.Println(strings.Contains(res.Stdout, "hello-world\r\n"), res.ExitCode, err != nil)
	// Output: true 3 true
}

func ExampleInteractive_Signal() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)

	term := sb.ExecInteractive(ctx, `trap 'echo interrupted; exit 0' INT; echo ready; while :; do sleep 0.1; done`)
	for chunk, err := range term.Stdout() {
		if err != nil {
			log.Fatal(err)
		}
		if strings.Contains(string(chunk), "ready") {
			break
		}
	}
	if err := term.Signal(ctx, "SIGINT"); err != nil {
		log.Fatal(err)
	}
	res, err := term.Wait()
	fmt.Println(strings.Contains(res.Stdout, "interrupted"), res.ExitCode, err)
	// Output: true 0 <nil>
}

func ExampleSandbox_CreateCodeContext() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)

	py, err := sb.CreateCodeContext(ctx, "python")
	if err != nil {
		log.Fatal(err)
	}
	defer py.Close(ctx)
	// State carries over from one run to the next.
	if _, err := py.Run(ctx, "total = 0\nfor i in range(5):\n    total += i").Wait(); err != nil {
		log.Fatal(err)
	}
	res, err := py.Run(ctx, "print(total)\nprint('done')").Wait()
	fmt.Printf("%q %v\n", res.Stdout, err)
	// Output: "10\ndone\n" <nil>
}

func ExampleCodeContext_Run() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)
	py, err := sb.CreateCodeContext(ctx, "python")
	if err != nil {
		log.Fatal(err)
	}
	defer py.Close(ctx)

	// The value of the last expression.
	res, err := py.Run(ctx, "x = 20\nx * 2 + 2").Wait()
	fmt.Printf("%q %v\n", res.Value, err)

	// An exception: exit code 1, its traceback on stderr, and its name and
	// value in the *CommandError (and the result).
	res, err = py.Run(ctx, "int('seven')").Wait()
	var ce *alineo.CommandError
	if errors.As(err, &ce) {
		fmt.Println(ce.ExitCode, ce.Exception.Name, "-", ce.Exception.Value)
	}
	lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
	fmt.Println(lines[0])
	fmt.Println(lines[len(lines)-1])
	// Output:
	// "42" <nil>
	// 1 ValueError - invalid literal for int() with base 10: 'seven'
	// Traceback (most recent call last):
	// ValueError: invalid literal for int() with base 10: 'seven'
}
