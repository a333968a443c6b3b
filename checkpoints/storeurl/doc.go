// Package storeurl opens the checkpoints.Store a URL names, for flags such
// as sandboxd's --checkpoints: postgres:// (or postgresql://) opens
// checkpoints/postgres, which several hosts may share; a plain path, file://
// or sqlite:// opens checkpoints/sqlite.
//
// It imports checkpoints, its sqlite and postgres stores and the standard
// library.
package storeurl
