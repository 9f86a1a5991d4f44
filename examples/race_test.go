//go:build race

package examples_test

// raceEnabled says this test binary was built with -race.
const raceEnabled = true
