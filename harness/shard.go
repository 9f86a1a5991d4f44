package harness

import (
	"flag"
	"fmt"
	"slices"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/record"
)

// ShardEnv splits every check of a test binary across machines: set to
// "i/n" (flag -twice.shard=i/n), Check and Run execute only shard i of n
// of each check's schedules, counted from 1 as CI matrices number their
// jobs: 1/3, 2/3 and 3/3 together run every schedule exactly once.
//
// Schedules are dealt out in turn by their place in the check's list (the
// faults' schedules, in the order of Config.Faults): schedule k goes to
// shard k mod n + 1. Every shard expands the same list from its own clean
// runs, so the split needs no coordination, and each shard gets the same
// number of schedules, give or take one, with a mix of every fault. Every
// shard still runs the two clean reference runs; a shard dealt none of a
// check's schedules passes it with 0 scenarios, and Result.Shard says so.
// Scenario.Index keeps each scenario's place in the whole list. A
// -twice.replay schedule is a list of one: shard 1 runs it. The orders
// the reduction of the concurrent faults left out (Result.Reductions)
// have places after the list; when a shard's deliveries diverge from what
// the reduction assumed, it runs the ones dealt to it. A shard that saw no
// divergence runs none, so if only some shards' scenarios diverge, the
// joined report lacks the other shards' share of those orders. For a
// queue that hands a job to one delivery at a time
// (queue.Rules.OneDeliveryAtATime), a shard not dealt concurrent-delivery's
// one order runs it too, unreported, to learn whether the queue handed
// out the second delivery, so every shard runs its share of the orders
// left out when it did.
//
// Explore runs its share of the budget (ExploreOptions.Checks or
// -twice.checks): n/Count, one more on the first shards, so the shares add
// up to it; saved schedules are dealt out like a check's. With -twice.seed
// shard i hands rapid the seed plus i-1, so shards draw different
// schedules; a finding prints the seed rapid used, which replays without
// -twice.shard. twice report -shard i/n passes it to the tests, and twice
// report --merge joins the shards' reports into one.
const ShardEnv = record.ShardEnv

// Shard is the share of a check's schedules one shard ran: shard Index of
// Count, the schedules whose Scenario.Index modulo Count is Index-1;
// Schedules counts the whole check's, and Faults names its faults.
type Shard = record.Shard

func init() {
	flag.String("twice.shard", "", "twice: run only shard `i/n` of every check's schedules (1/3, 2/3, 3/3); empty runs all (env "+ShardEnv+")")
}

// shardSetting is -twice.shard or TWICE_SHARD; nil when unset.
func shardSetting() (*Shard, error) {
	text := setting("twice.shard", ShardEnv)
	if text == "" {
		return nil, nil
	}
	s, err := record.ParseShard(text)
	if err != nil {
		return nil, fmt.Errorf("[twice] -twice.shard or %s: %w", ShardEnv, err)
	}
	return &s, nil
}

// takeShard returns the schedules of this machine's shard, and records in
// res which shard ran. Unsharded, it returns scheds.
func takeShard(scheds []faults.Schedule, res *Result) ([]faults.Schedule, error) {
	sh, err := shardSetting()
	if err != nil || sh == nil {
		return scheds, err
	}
	sh.Schedules = len(scheds)
	var mine []faults.Schedule
	for i, s := range scheds {
		if !slices.Contains(sh.Faults, s.Fault) {
			sh.Faults = append(sh.Faults, s.Fault)
		}
		if sh.Has(i) {
			mine = append(mine, s)
		}
	}
	res.Shard = sh
	return mine, nil
}

// place is the Index of the k-th scenario of res: its place among the
// whole check's schedules.
func place(res *Result, k int) int {
	if res.Shard == nil {
		return k
	}
	return res.Shard.Place(k)
}

// exploreShard cuts an exploration down to this machine's shard, nil
// when unsharded: its share of the budget checks and of the saved
// schedules.
func exploreShard(checks int, saved []savedSchedule) (int, []savedSchedule, *Shard, error) {
	sh, err := shardSetting()
	if err != nil || sh == nil {
		return checks, saved, nil, err
	}
	var mine []savedSchedule
	for i, s := range saved {
		if sh.Has(i) {
			mine = append(mine, s)
		}
	}
	return sh.Share(checks), mine, sh, nil
}
