package harness

import "time"

// SetExploreStreams sets how many rapid.Checks draw at once, and returns
// a func that restores it; BenchmarkExploreVsMatrix prices one stream in
// the same run as several. Not for parallel tests.
func SetExploreStreams(n int) (restore func()) {
	old := streams
	streams = n
	return func() { streams = old }
}

// ExploreCounts is how many deliveries the schedules x executed held, and
// how many clean runs at a later clock they were compared with.
func ExploreCounts(x *Exploration) (deliveries, references int) {
	return x.deliveries, x.references
}

// ExplorePoolUse is how full the scenario pool was while x drew: the
// scenarios' run time summed over the drawing's wall time times width.
func ExplorePoolUse(x *Exploration, width int) float64 {
	return x.busy.Seconds() / (x.drawing.Seconds() * float64(width))
}

// ExploreTimes calls f with every schedule x executed: how many
// deliveries it held and how long its scenario took.
func ExploreTimes(x *Exploration, f func(deliveries int, took time.Duration)) {
	for _, t := range x.timed {
		f(t.deliveries, t.took)
	}
}
