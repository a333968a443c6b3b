// Package storeurl opens the checkpoints.Store a URL names, for flags such
// as sandboxd's --checkpoints: postgres:// (or postgresql://) opens
// checkpoints/postgres, which several hosts may share; a plain path, file://
// or sqlite:// opens checkpoints/sqlite. The checkpoints package's Example
// opens a store this way, appends, reads a lineage and forks.
//
// Of this module it imports checkpoints, checkpoints/postgres and
// checkpoints/sqlite only, and the standard library.
package storeurl
