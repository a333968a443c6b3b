// Package adaptertest is the conformance suite every adapters.Store passes, named
// like httptest: Run checks the Store contract, RunProjection the
// ProjectionStore contract. An implementation's tests call them with a
// constructor that returns a fresh, empty store per call.
//
// It imports events, adapters and the standard library (testing) only; it must
// never import an implementation.
package adaptertest
