// Package plain has tests but no harness check: twice report has nothing
// to report and exits 2.
package plain

import "testing"

func TestSum(t *testing.T) {
	if 1+1 != 2 {
		t.Fatal("1+1 != 2")
	}
}
