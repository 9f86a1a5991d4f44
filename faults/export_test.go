package faults

// Interleavings is interleavings, for the black-box tests.
var Interleavings = interleavings

// ReducedInterleavings is reducedInterleavings for a clean run of steps.
func ReducedInterleavings(steps []Step, max int) [][]int {
	return reducedInterleavings(len(steps), max, freeIndependence(steps))
}

// NormalForm is normalForm for a clean run of steps.
func NormalForm(steps []Step, o []int) []int { return normalForm(o, freeIndependence(steps)) }
