// Package registrytest is the tests' in-process OCI registry
// (go-containerregistry's) on loopback, with images the tests build: a
// statically linked program, files, whiteouts and an image config. It counts
// the blobs it serves, can require basic auth and can corrupt or substitute a blob.
//
// Of this module it imports internal/testutil only (and the standard
// library and go-containerregistry).
package registrytest
