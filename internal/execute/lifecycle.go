package execute

import "fmt"

// life is where a delivery is in its life: one value per delivery, changed
// only through next, so that no two flags can disagree about it.
//
//	waiting ─handOut→ begun ─start→ running ─runLate→ overdue ─cancel→ cancelled
//	           │  ↑                   │                  │                 │
//	        hold release              ├──────────────────┴─────────────────┤
//	           ↓  │                   │ settle (the queue acks or nacks)   │ die
//	           held                   ↓                                    ↓
//	                                returned ─finish→ settled             dead
//
// finish also ends running, overdue and cancelled directly (no queue, a
// lost ack, a worker that could not be built); die ends any of running,
// overdue, cancelled and returned; refuse ends waiting and begun as
// undelivered (the queue refused the copy, or a panic settled the
// scenario before it was handed out).
type life int

const (
	waiting     life = iota // not handed out yet
	begun                   // the clock moved to it; the queue is asked for it
	held                    // begun, and waiting for deliveries the queue cancelled to react (cancel.go)
	running                 // its handler runs
	overdue                 // running past the queue's cancel time: cancelled once it waits on the harness
	cancelled               // running with its context cancelled
	returned                // its handler returned; the queue's Ack or Nack runs
	settled                 // over: it returned (and was acked or nacked), or stopped cleanly
	dead                    // over: its worker died (a crash, a hang, a panic that settled the scenario)
	undelivered             // over without running: the queue never handed it out
)

var lifeNames = [...]string{"waiting", "begun", "held", "running", "overdue", "cancelled", "returned", "settled", "dead", "undelivered"}

func (l life) String() string {
	if l < 0 || int(l) >= len(lifeNames) {
		return fmt.Sprintf("life(%d)", int(l))
	}
	return lifeNames[l]
}

// started reports whether its handler was started, whatever came after.
func (l life) started() bool { return l >= running && l <= dead }

// over reports whether the delivery has ended: settled, dead or never
// delivered.
func (l life) over() bool { return l >= settled }

// live reports whether its handler was started and the delivery has not
// ended: it runs, or its Ack or Nack does.
func (l life) live() bool { return l >= running && l <= returned }

// acting reports whether its handler runs: live, and not yet returned.
func (l life) acting() bool { return l >= running && l <= cancelled }

// lifeEvent is what moves a delivery from one life to the next.
type lifeEvent int

const (
	onHandOut lifeEvent = iota // its turn came: the clock moves, the queue is asked
	onHold                     // it waits for cancelled deliveries to react
	onRelease                  // they have
	onStart                    // its handler starts
	onRunLate                  // it has run the queue's cancel time
	onCancel                   // its context is cancelled
	onSettle                   // its handler returned; the queue acks or nacks it
	onFinish                   // it ends cleanly
	onDie                      // its worker dies
	onRefuse                   // the queue will never hand it out
)

var lifeEventNames = [...]string{"handOut", "hold", "release", "start", "runLate", "cancel", "settle", "finish", "die", "refuse"}

func (ev lifeEvent) String() string {
	if ev < 0 || int(ev) >= len(lifeEventNames) {
		return fmt.Sprintf("lifeEvent(%d)", int(ev))
	}
	return lifeEventNames[ev]
}

// lifeMoves is every move a delivery can make: from a life, on an event,
// to a life. Anything else is a bug in the executor.
var lifeMoves = map[life]map[lifeEvent]life{
	waiting:   {onHandOut: begun, onRefuse: undelivered},
	begun:     {onHold: held, onStart: running, onRefuse: undelivered},
	held:      {onRelease: begun},
	running:   {onRunLate: overdue, onSettle: returned, onFinish: settled, onDie: dead},
	overdue:   {onCancel: cancelled, onSettle: returned, onFinish: settled, onDie: dead},
	cancelled: {onSettle: returned, onFinish: settled, onDie: dead},
	returned:  {onFinish: settled, onDie: dead},
}

// next is the life that ev leads to from l, or an error naming the move
// that is not one.
func (l life) next(ev lifeEvent) (life, error) {
	if to, ok := lifeMoves[l][ev]; ok {
		return to, nil
	}
	return l, fmt.Errorf("execute: a delivery that is %s cannot %s", l, ev)
}
