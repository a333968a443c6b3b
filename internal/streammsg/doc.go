// Package streammsg reads one message of a JetStream stream from the
// stream's leader, through JetStream's STREAM.MSG.GET API, whatever the
// stream's AllowDirect: nats.go's jetstream.Stream turns GetMsg and
// GetLastMsgForSubject into direct gets, which any replica answers, possibly
// a stale one, once a stream allows them, and a fence or a last-sequence read
// must see the leader's state. It also holds the request both APIs take
// (Request), for the bus's batched direct gets.
//
// Of this module it imports nothing: it is a leaf.
package streammsg
