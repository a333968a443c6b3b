// Package usagetest checks a command's help and usage errors, the way every
// binary of this module answers them (package usage).
//
// Of this module it imports internal/usage only.
package usagetest
