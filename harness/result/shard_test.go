package result_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/runtwice/twice/harness/result"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       result.Shard
		err        string // a part of the error, "" for none
	}{
		{name: "first", text: "1/3", want: result.Shard{Index: 1, Count: 3}},
		{name: "last", text: "3/3", want: result.Shard{Index: 3, Count: 3}},
		{name: "one of one", text: "1/1", want: result.Shard{Index: 1, Count: 1}},
		{name: "spaces around", text: " 2/5 ", want: result.Shard{Index: 2, Count: 5}},
		{name: "counted from 0", text: "0/3", err: `"0/3" names shard 0 of 3; shards count from 1 to n: want 1/3 to 3/3`},
		{name: "past the last", text: "4/3", err: `"4/3" names shard 4 of 3; shards count from 1 to n: want 1/3 to 3/3`},
		{name: "no shards", text: "2/0", err: `"2/0" splits the checks into 0 shards; want i/n with n at least 1, like 2/3`},
		{name: "negative", text: "-1/3", err: `"-1/3" names shard -1 of 3`},
		{name: "letters", text: "x/y", err: `"x/y" is not a shard; want i/n, shard i of n counted from 1, like 2/3`},
		{name: "no slash", text: "2", err: `"2" is not a shard`},
		{name: "empty", text: "", err: `"" is not a shard`},
		{name: "three parts", text: "1/2/3", err: `"1/2/3" is not a shard`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := result.ParseShard(tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseShard(%q) = %v, %v; want an error containing %q", tc.text, got, err, tc.err)
				}
				return
			}
			if err != nil || got.Index != tc.want.Index || got.Count != tc.want.Count {
				t.Fatalf("ParseShard(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
			}
			if got.String() != strings.TrimSpace(tc.text) {
				t.Errorf("String() = %q, want %q", got, strings.TrimSpace(tc.text))
			}
		})
	}
}

// The shards of a check's schedules are a partition: every schedule is
// in exactly one shard, Place lists a shard's schedules in order, the
// shards' sizes differ by at most one, and budget shares add up.
func TestShardsPartitionSchedules(t *testing.T) {
	for n := 1; n <= 7; n++ {
		for total := 0; total <= 40; total++ {
			owners := make([]int, total)
			sizes := make([]int, n)
			for i := 1; i <= n; i++ {
				sh := result.Shard{Index: i, Count: n}
				var places []int
				for k := 0; sh.Place(k) < total; k++ {
					places = append(places, sh.Place(k))
				}
				var has []int
				for x := range total {
					if sh.Has(x) {
						owners[x]++
						has = append(has, x)
					}
				}
				if !slices.Equal(places, has) {
					t.Fatalf("shard %s of %d schedules: Place gives %v, Has gives %v", sh, total, places, has)
				}
				sizes[i-1] = len(has)
				if got := sh.Share(total); got != len(has) {
					t.Errorf("shard %s: Share(%d) = %d, want %d, its share of schedules", sh, total, got, len(has))
				}
			}
			for x, o := range owners {
				if o != 1 {
					t.Fatalf("%d shards of %d schedules: schedule %d is in %d shards, want 1", n, total, x, o)
				}
			}
			lo, hi := sizes[0], sizes[0]
			for _, s := range sizes {
				lo, hi = min(lo, s), max(hi, s)
			}
			if hi-lo > 1 {
				t.Errorf("%d shards of %d schedules: sizes %v differ by more than one", n, total, sizes)
			}
		}
	}
}
