package harness

// SetExploreBatch sets how many schedules one rapid check draws at most,
// and returns a func that restores it; BenchmarkExploreVsMatrix prices
// the old batch in the same run as the new one. Not for parallel tests.
func SetExploreBatch(n int) (restore func()) {
	old := batch
	batch = n
	return func() { batch = old }
}
