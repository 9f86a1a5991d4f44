package queue

import (
	"context"
	"fmt"
	"runtime/debug"
)

// RunProducer calls produce with p: one call of the producer's own code
// for an enqueue, as an adapter runs it in Enqueue instead of enqueueing
// the job itself (twicegue.Producer, twicekafka.Produce). A panic in the
// code is an error, with its stack.
func RunProducer[P any](ctx context.Context, produce func(ctx context.Context, p P) error, p P) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return produce(ctx, p)
}

// ProducerCall is one call of the producer's own code (RunProducer) and
// the words FollowOne's answers name it and what it made with. The
// examples are gue's.
type ProducerCall struct {
	// Which names the code and the enqueue; an error starts with it:
	// `twicegue: job "x": the producer's code (twicegue.Producer), enqueue 2`.
	Which string
	// Job is the enqueue's Op.Job: 1 for the original, 2 and up for the
	// producer's copies.
	Job int
	// Verb is what the code did, in the past tense: "enqueued".
	Verb string
	// Kind is what the check follows, of the kinds FollowOne reads off
	// what the code made (gue's job type, a Kafka topic): "x".
	Kind string
	// One and Many name one and several of what the check follows, as
	// formats of Kind: "job of type %q", "jobs of type %q".
	One, Many string
	// Others lists the kinds of what else the code made, as they follow
	// Verb in "(it enqueued ...)"; nil lists them with %q: `["ledger"]`.
	Others func(kinds []string) string
	// Follows says, after "the check follows ", what the code must make
	// when the original makes none: "the job it enqueues: call Enqueue on
	// Producing.Client".
	Follows string
	// Per says, after "the check follows one ", how many the code may
	// make: "job per enqueue".
	Per string
}

// FollowOne is the one thing of c.Kind that the check follows out of
// made, what the producer's code made in call c, whose kinds kind reads:
// the check follows one per call. With none, the original's code is an
// error, and a copy's is a Duplicate: the producer found its earlier
// enqueue and refused its own retry. More than one is an error. An
// adapter returns the Enqueued and the error as they are when either
// is set.
func FollowOne[T any](c ProducerCall, made []T, kind func(T) string) (T, Enqueued, error) {
	var mine []T
	var others []string
	for _, m := range made {
		if k := kind(m); k == c.Kind {
			mine = append(mine, m)
		} else {
			others = append(others, k)
		}
	}
	var none T
	switch len(mine) {
	case 0:
		also := ""
		if len(others) > 0 {
			list := fmt.Sprintf("%q", others)
			if c.Others != nil {
				list = c.Others(others)
			}
			also = fmt.Sprintf(" (it %s %s)", c.Verb, list)
		}
		one := fmt.Sprintf(c.One, c.Kind)
		if c.Job == 1 {
			return none, Enqueued{}, fmt.Errorf("%s %s no %s%s; the check follows %s", c.Which, c.Verb, one, also, c.Follows)
		}
		return none, Enqueued{Duplicate: true, Reason: fmt.Sprintf("the producer's code %s no %s on its retry%s", c.Verb, one, also)}, nil
	case 1:
		return mine[0], Enqueued{}, nil
	}
	return none, Enqueued{}, fmt.Errorf("%s %s %d %s in one call; the check follows one %s of the producer", c.Which, c.Verb, len(mine), fmt.Sprintf(c.Many, c.Kind), c.Per)
}
