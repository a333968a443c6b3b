// Package testutil holds the small helpers that tests and test harnesses of
// this module used to copy: a buffer safe for concurrent writes, free
// loopback ports, where make deps put a tool (FindTool), a static build of a
// package (BuildStatic), the packages a command links (LinkedPackages), the
// count of goroutines the process started (GoroutinesCreated), the sandbox
// init's program built once (SandboxInit), and the harness that starts a
// command's run function (cmd/*'s run(ctx, args, getenv, stdout)) in a
// goroutine and stops it.
//
// Of this module it imports nothing: testenv and the commands' tests import
// it, so it must not import testenv or any package that does.
package testutil
