// Package usage is the command-line convention every alineo binary follows:
// -h/--help prints the usage on stdout and exits 0, a bad flag or argument
// prints the error and the usage on stderr and exits 2, and any other error
// exits 1. It lives under internal/ so that projections/projectorcmd, the
// projector's command line for users' own binaries, follows it too.
//
// Of this module it imports nothing: only the standard library, so every main
// may use it (cmd/sandboxd and cmd/alineo included).
package usage
