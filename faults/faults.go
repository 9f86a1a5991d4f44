// Package faults describes how a queue makes a job run more than once.
//
// Every fault is a schedule: which deliveries run, which job ID each one
// carries and which attempt it is. A Fault is a value built by a verb-first
// constructor (RunTwice, ProducerRetry); the harness expands it into the
// schedules it executes. Default is the matrix a plain harness.Check runs.
package faults

// Fault is one way a job can be delivered more than once. Its values come
// from this package's constructors; other packages cannot add kinds.
type Fault interface {
	// Name is the fault's short name, used in reports: "run-twice".
	Name() string
	// Schedules expands the fault into the schedules to execute.
	Schedules() []Schedule
	sealed()
}

type fault struct {
	name      string
	schedules []Schedule
}

func (f fault) Name() string          { return f.name }
func (f fault) Schedules() []Schedule { return append([]Schedule(nil), f.schedules...) }
func (fault) sealed()                 {}

// RunTwice is the seed's cheapest check: the job completes, then the queue
// delivers the same job ID again as attempt 2.
func RunTwice() Fault {
	return fault{name: "run-twice", schedules: []Schedule{{
		Fault: "run-twice",
		Deliveries: []Delivery{
			{Job: 1, Attempt: 1, Worker: 1},
			{Job: 1, Attempt: 2, Worker: 2},
		},
	}}}
}

// ProducerRetry is a producer that enqueued the job twice: the second copy
// carries a new job ID with the same arguments and runs after the first
// completed.
func ProducerRetry() Fault {
	return fault{name: "producer-retry", schedules: []Schedule{{
		Fault: "producer-retry",
		Deliveries: []Delivery{
			{Job: 1, Attempt: 1, Worker: 1},
			{Job: 2, Attempt: 1, Worker: 2},
		},
	}}}
}

// Default returns the matrix harness.Check runs when the configuration names
// no faults.
func Default() []Fault {
	return []Fault{RunTwice(), ProducerRetry()}
}
