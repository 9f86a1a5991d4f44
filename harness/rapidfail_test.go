package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// The seed is read from a fail file as rapid writes it: its failing
// test's output as "#" comments, then "<version>#<seed>", then the
// bitstream.
func TestFailFileSeed(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		seed       uint64
		err        bool
	}{
		{"as rapid writes it", "# [rapid] draw schedules: ...\n# \nv0.4.8#1234567890123\n0x1\n0x2a", 1234567890123, false},
		{"no comments", "v0.4.8#7\n0x0", 7, false},
		{"no seed field", "# output\nv0.4.8\n0x1", 0, true},
		{"empty", "# only output\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "x.fail")
			if err := os.WriteFile(f, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			seed, err := failFileSeed(f)
			if (err != nil) != tc.err || seed != tc.seed {
				t.Errorf("failFileSeed = %d, %v; want %d, error %v", seed, err, tc.seed, tc.err)
			}
		})
	}
}
