// Package archtest holds the test that keeps the module's rooms as
// docs/architecture.md draws them: it reads the table of packages and the
// imports each may have (the fenced block "imports" of that document), and
// fails when a package imports a package of this module its row does not
// allow, when a package has no row or a row no package, when a row allows an
// import of a higher rank than its own, or when a doc.go states other import
// rules than its row. It also counts the imports that run upward in the
// ranking (file by file), for the record.
//
// The package has no code: only its test, which runs go list and parses
// source files with go/parser.
//
// Of this module it imports nothing.
package archtest
