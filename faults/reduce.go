package faults

// Partial-order reduction of the concurrent faults' interleavings.
//
// Two orders that differ only by swapping adjacent steps of the two
// deliveries that cannot affect each other end in the same state, so only
// one of them needs to run. The one kept is the lexicographic normal form
// (1 before 2): for two deliveries it is exactly the order in which no
// step of delivery 2 is immediately followed by a step of delivery 1 that
// is independent of it.
//
// A step is independent of every step of the other delivery when it is
// free: Step.Local, and either its delivery's first step or right
// after another local step. The second condition matters because of how the
// executor steers: a delivery whose previous step waits on a lock cannot
// take its turn, so moving a Local step before the other delivery's
// COMMIT that ends that wait would not run what the pruned order runs.
// A step right after a Local one never waits: Local steps take no lock.
//
// The classes come from the clean run's steps; a delivery that diverges
// (it sees the other's writes) may take another step at that position.
// The harness checks every run order's actual steps at the free positions
// and, when one differs, runs the pruned orders as well.

// Free reports, for each of steps, whether the reduction treats it as
// independent of every step of another delivery running beside it: it
// is local (Step.Local), and it is the first step or follows a local
// one. An effect call is never local, whatever its Local says.
func Free(steps []Step) []bool {
	local := func(s Step) bool { return s.Local && !s.IsEffect() }
	out := make([]bool, len(steps))
	for i, s := range steps {
		out[i] = local(s) && (i == 0 || local(steps[i-1]))
	}
	return out
}

// independence says whether step i of delivery 1 and step j of delivery 2
// (both 1-based) commute.
type independence func(i, j int) bool

func freeIndependence(steps []Step) independence {
	free := Free(steps)
	return func(i, j int) bool { return free[i-1] || free[j-1] }
}

// normalForm returns the normal form of o's class: it moves every step of
// delivery 1 before the independent steps of delivery 2 right before it,
// until none is left. Swapping adjacent steps of different deliveries
// keeps which step of its delivery each entry stands for.
func normalForm(o []int, indep independence) []int {
	o = append([]int(nil), o...)
	for swapped := true; swapped; {
		swapped = false
		ones, twos := 0, 0
		for t := 0; t < len(o); t++ {
			if o[t] == 2 {
				twos++
				continue
			}
			ones++
			if t > 0 && o[t-1] == 2 && indep(ones, twos) {
				// The 2 moves to t, still counted; the 1 gets a new
				// left neighbour, looked at on the next pass.
				o[t-1], o[t] = 1, 2
				swapped = true
			}
		}
	}
	return o
}

// countNormal counts the normal orders of two deliveries of n steps each,
// saturating at limit+1.
func countNormal(n int, indep independence, limit int) int {
	// memo[i][j][last2]: orders completing a prefix with i steps of
	// delivery 1 and j of delivery 2, the last one of delivery 2 if last2.
	memo := make([][][2]int, n+1)
	for i := range memo {
		memo[i] = make([][2]int, n+1)
		for j := range memo[i] {
			memo[i][j] = [2]int{-1, -1}
		}
	}
	var count func(i, j, last2 int) int
	count = func(i, j, last2 int) int {
		if i == n && j == n {
			return 1
		}
		if c := memo[i][j][last2]; c >= 0 {
			return c
		}
		c := 0
		if i < n && (last2 == 0 || !indep(i+1, j)) {
			c += count(i+1, j, 0)
		}
		if j < n {
			c += count(i, j+1, 1)
		}
		c = min(c, limit+1)
		memo[i][j][last2] = c
		return c
	}
	return count(0, 0, 0)
}

// normalOrders returns every normal order of two deliveries of n steps
// each, in lexicographic order.
func normalOrders(n int, indep independence) [][]int {
	var out [][]int
	var walk func(prefix []int, i, j int)
	walk = func(prefix []int, i, j int) {
		if i == n && j == n {
			out = append(out, append([]int(nil), prefix...))
			return
		}
		last2 := len(prefix) > 0 && prefix[len(prefix)-1] == 2
		if i < n && (!last2 || !indep(i+1, j)) {
			walk(append(prefix, 1), i+1, j)
		}
		if j < n {
			walk(append(prefix, 2), i, j+1)
		}
	}
	walk(nil, 0, 0)
	return out
}

// reducedInterleavings is interleavings(n, n, max) with equivalent orders
// left out: every normal order while there are at most max, else the
// normal forms of the same candidates interleavings samples from, without
// repeats, until there are max. Every order interleavings(n, n, max)
// returns has its normal form among them.
func reducedInterleavings(n, max int, indep independence) [][]int {
	if max < 1 {
		max = 1
	}
	if countNormal(n, indep, max) <= max {
		return normalOrders(n, indep)
	}
	s := newSampler(n, n, max)
	for o := range s.candidates(100 * max) {
		s.add(normalForm(o, indep))
	}
	return s.out
}
