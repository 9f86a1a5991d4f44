package execute

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLifeMoves walks the lives a delivery goes through in each way a
// scenario ends it, as the executor moves it, with no server: every
// move of a path must be allowed, and its end must say what the
// executor reads of it (started, over, live, acting).
func TestLifeMoves(t *testing.T) {
	type want struct{ started, over, live, acting bool }
	for _, tc := range []struct {
		name string
		path []lifeEvent
		end  life
		want want
	}{
		{"not handed out yet", nil, waiting, want{}},
		{"the queue is asked", []lifeEvent{onHandOut}, begun, want{}},
		{"waits for cancelled deliveries", []lifeEvent{onHandOut, onHold}, held, want{}},
		{"runs once they reacted", []lifeEvent{onHandOut, onHold, onRelease, onStart}, running, want{started: true, live: true, acting: true}},
		{"returned without a queue", []lifeEvent{onHandOut, onStart, onFinish}, settled, want{started: true, over: true}},
		{"acked by its queue", []lifeEvent{onHandOut, onStart, onSettle}, returned, want{started: true, live: true}},
		{"acked and settled", []lifeEvent{onHandOut, onStart, onSettle, onFinish}, settled, want{started: true, over: true}},
		{"crashed", []lifeEvent{onHandOut, onStart, onDie}, dead, want{started: true, over: true}},
		{"overdue, not yet cancelled", []lifeEvent{onHandOut, onStart, onRunLate}, overdue, want{started: true, live: true, acting: true}},
		{"cancelled, still running", []lifeEvent{onHandOut, onStart, onRunLate, onCancel}, cancelled, want{started: true, live: true, acting: true}},
		{"cancelled, then returned to its queue", []lifeEvent{onHandOut, onStart, onRunLate, onCancel, onSettle}, returned, want{started: true, live: true}},
		{"cancelled, then hung past its timeout", []lifeEvent{onHandOut, onStart, onRunLate, onCancel, onDie}, dead, want{started: true, over: true}},
		{"overdue, returned before its cancel", []lifeEvent{onHandOut, onStart, onRunLate, onFinish}, settled, want{started: true, over: true}},
		{"a duplicate copy the queue refused", []lifeEvent{onHandOut, onRefuse}, undelivered, want{over: true}},
		{"never handed out: a panic settled the scenario", []lifeEvent{onRefuse}, undelivered, want{over: true}},
		{"its worker could not be built", []lifeEvent{onHandOut, onStart, onFinish}, settled, want{started: true, over: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := waiting
			for _, ev := range tc.path {
				var err error
				l, err = l.next(ev)
				require.NoError(t, err)
			}
			assert.Equal(t, tc.end, l)
			assert.Equal(t, tc.want, want{l.started(), l.over(), l.live(), l.acting()}, "%s", l)
		})
	}
}

// TestLifeRefusesWhatCannotHappen: a move the executor must never make
// is an error that names the life and the event, and leaves the life as
// it was. An ended delivery in particular can neither start again nor
// die twice: its later steps and return value are ignored before any
// move is asked for.
func TestLifeRefusesWhatCannotHappen(t *testing.T) {
	for _, tc := range []struct {
		from life
		ev   lifeEvent
	}{
		{waiting, onStart},
		{held, onStart},
		{running, onStart},
		{running, onCancel},
		{returned, onSettle},
		{settled, onDie},
		{dead, onFinish},
		{dead, onDie},
		{undelivered, onStart},
		{cancelled, onRunLate},
	} {
		t.Run(tc.from.String()+"/"+tc.ev.String(), func(t *testing.T) {
			got, err := tc.from.next(tc.ev)
			require.Error(t, err)
			assert.Equal(t, tc.from, got)
			assert.Equal(t, "execute: a delivery that is "+tc.from.String()+" cannot "+tc.ev.String(), err.Error())
		})
	}
}

// TestEveryLifeIsReachable: each life in the list is reached by some
// move from another, so none is dead weight, and each is named.
func TestEveryLifeIsReachable(t *testing.T) {
	reached := map[life]bool{waiting: true}
	for _, moves := range lifeMoves {
		for _, to := range moves {
			reached[to] = true
		}
	}
	for l := waiting; l <= undelivered; l++ {
		assert.True(t, reached[l], "%s is never reached", l)
		assert.NotContains(t, l.String(), "life(", "%d has no name", int(l))
	}
}
