// Command app is the one program of the images the tests build: statically
// linked, it needs no libc and no shell.
//
//	app sleep             block until killed
//	app cat FILE...       print the files
//	app exists PATH       print yes or no
//	app env | pwd | id    print the environment, the cwd, "uid gid"
//	app write FILE TEXT   write TEXT to FILE
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: app sleep|cat|exists|env|pwd|id|write")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "sleep":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	case "cat":
		for _, f := range args {
			b, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Stdout.Write(b)
		}
	case "exists":
		if _, err := os.Lstat(args[0]); err == nil {
			fmt.Println("yes")
		} else {
			fmt.Println("no")
		}
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case "pwd":
		d, _ := os.Getwd()
		fmt.Println(d)
	case "id":
		fmt.Println(os.Getuid(), os.Getgid())
	case "write":
		if err := os.WriteFile(args[0], []byte(args[1]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "app: unknown command", os.Args[1])
		os.Exit(2)
	}
}
