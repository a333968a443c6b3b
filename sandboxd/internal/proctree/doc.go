// Package proctree finds the processes below a process, from /proc. It serves both the
// sandbox server (killing, freezing and inspecting a sandbox's tree) and execd (killing the
// processes a command left outside its process group).
//
// It imports only the standard library, so execd, which runs inside the sandbox and must know
// nothing of the lifecycle server, may use it.
//
// Of this module it imports nothing: only the standard library.
package proctree
