package faults

// Interleavings is interleavings, for the black-box tests.
var Interleavings = interleavings
