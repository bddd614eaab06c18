//go:build !linux

package verify

import "testing"

// newForkRunner: the fork runner is Linux-only; elsewhere Run starts its runners itself.
func newForkRunner(t testing.TB, python string) Runner { return nil }
