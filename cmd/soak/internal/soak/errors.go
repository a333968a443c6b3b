package soak

import "errors"

// ErrInterrupted is Run's error when its context ended (SIGINT or SIGTERM)
// before the checks: the fleet was stopped at once and the report holds
// what the run had so far.
var ErrInterrupted = errors.New("soak interrupted")

// ErrNetPlan is the error of a network that cannot be laid out: a prefix,
// subnet or node count PlanNetwork refuses.
var ErrNetPlan = errors.New("bad network plan")

// ErrNetworkBusy is the error of a multi-host soak whose network lock
// another run holds (two runs with one prefix would tear down each other's
// namespaces).
var ErrNetworkBusy = errors.New("network in use by another soak")

// errStopping is the error of a start once the soak is stopping.
var errStopping = errors.New("the soak is stopping")

// errNotReady is returned by a readiness wait that ran out of time.
var errNotReady = errors.New("not ready")
