// Package workers runs functions on goroutines that outlive them. A
// goroutine starts with a small stack, and a call deep enough, such as an
// exec's commit of its entries through a durable store (its chain hash, its
// transaction), grows it by copying it to one twice the size, two or three
// times over; a goroutine started for each exec pays that again every time.
// A worker, once its function returns, waits a while for the next one
// rather than exiting, so the next function runs on the stack the last one
// grew, and no goroutine is started for it.
//
// Of this module it imports nothing: it is a leaf.
package workers
