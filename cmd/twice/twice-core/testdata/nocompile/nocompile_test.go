// Package nocompile does not compile: twice report must exit 2.
package nocompile

import "testing"

func TestNothing(t *testing.T) {
	unused := 1
}
