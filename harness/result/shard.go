package result

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/runtwice/twice/faults"
)

// Shard names one shard of a check split across machines: shard Index of
// Count, counted from 1 as CI matrices number their jobs (1/3, 2/3, 3/3).
// Its text form is "i/n" (harness.ShardEnv, -twice.shard, twice report
// -shard).
type Shard struct {
	// Index is the shard's number, 1 to Count.
	Index int
	// Count is how many shards the check's schedules are split into.
	Count int
}

// ParseShard reads a shard in its text form "i/n". The error says what is
// wrong with text, without naming where it came from.
func ParseShard(text string) (Shard, error) {
	is, ns, ok := strings.Cut(strings.TrimSpace(text), "/")
	i, ierr := strconv.Atoi(is)
	n, nerr := strconv.Atoi(ns)
	switch {
	case !ok || ierr != nil || nerr != nil:
		return Shard{}, fmt.Errorf("%q is not a shard; want i/n, shard i of n counted from 1, like 2/3", text)
	case n < 1:
		return Shard{}, fmt.Errorf("%q splits the checks into %d shards; want i/n with n at least 1, like 2/3", text, n)
	case i < 1 || i > n:
		return Shard{}, fmt.Errorf("%q names shard %d of %d; shards count from 1 to n: want 1/%d to %d/%d", text, i, n, n, n, n)
	}
	return Shard{Index: i, Count: n}, nil
}

// String is the shard's text form, "2/3".
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Has reports whether the schedule at place index (from 0) of a check's
// schedules is this shard's. Schedules are dealt out in turn, like
// cards: every shard gets the same number, give or take one, and a mix of
// every fault, rather than one shard all the costly interleavings.
func (s Shard) Has(index int) bool { return index%s.Count == s.Index-1 }

// Place is the place among a check's schedules of this shard's k-th
// schedule (both from 0).
func (s Shard) Place(k int) int { return s.Index - 1 + k*s.Count }

// Share is this shard's part of a budget of n: n/Count, and one more for
// the first n%Count shards, so the shares add up to n.
func (s Shard) Share(n int) int {
	share := n / s.Count
	if s.Index <= n%s.Count {
		share++
	}
	return share
}

// ShardRun is what one shard of a check ran: the schedules whose Index
// modulo Count is Index-1, or those Dealt to it by cost.
type ShardRun struct {
	Shard
	// Schedules counts the check's schedules, every shard's together; 0
	// for an exploration, whose shards draw their own.
	Schedules int `json:",omitempty"`
	// Faults are the faults of the whole check, each once, in the order
	// of their first schedule: a shard's report lists the faults it ran
	// no schedule of, so shards' reports merge in the unsharded order.
	Faults []faults.Name `json:",omitempty"`
	// From names the CI system's variables the shard came from
	// ("CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL"), when neither TWICE_SHARD
	// nor -twice.shard gave it.
	From string `json:",omitempty"`
	// Dealt are the places, among the check's schedules (from 0), of this
	// shard's, when they were dealt by cost (twice report -timings); empty
	// when they were dealt in turn.
	Dealt []int `json:",omitempty"`
}

// Place is the place among the check's schedules of this shard's k-th
// schedule (both from 0).
func (s ShardRun) Place(k int) int {
	if len(s.Dealt) > 0 {
		return s.Dealt[k]
	}
	return s.Shard.Place(k)
}
