package twicewatermill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// outcome is what one call of the conformance handler does.
type outcome string

const (
	ok       outcome = "ok"
	fail     outcome = "error"
	panicked outcome = "panic"
)

// act does o, as the handler's call.
func act(o outcome) error {
	switch o {
	case fail:
		return errors.New("refused")
	case panicked:
		panic("boom")
	}
	return nil
}

// The subscriber in front of each worker's router is the harness's, a
// model of a broker's subscriber: it is held to Watermill's own GoChannel
// Pub/Sub, whose subscriber resends a nacked message to the same router.
// The same handler outcomes, behind the same middleware, must make the
// same calls of the handler, with the same message UUID, until the
// message is acked.
func TestSubscriberConformsToGoChannel(t *testing.T) {
	dedup := func() message.HandlerMiddleware { return (&middleware.Deduplicator{}).Middleware }
	recoverer := func() message.HandlerMiddleware { return middleware.Recoverer }
	for _, tc := range []struct {
		name       string
		outcomes   []outcome
		middleware []func() message.HandlerMiddleware
	}{
		{"ok", []outcome{ok}, nil},
		{"error then ok", []outcome{fail, ok}, nil},
		{"panic then ok", []outcome{panicked, ok}, nil},
		{"panics then ok", []outcome{panicked, fail, panicked, ok}, nil},
		{"panic behind Recoverer", []outcome{panicked, ok}, []func() message.HandlerMiddleware{recoverer}},
		{"panic behind Deduplicator", []outcome{panicked, ok}, []func() message.HandlerMiddleware{dedup}},
		{"error behind Deduplicator", []outcome{fail, ok}, []func() message.HandlerMiddleware{dedup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real := goChannelCalls(t, tc.outcomes, tc.middleware)
			modelled := harnessCalls(t, tc.outcomes, tc.middleware)
			require.NotEmpty(t, modelled)
			for i, calls := range modelled {
				assert.Equal(t, len(real), calls, "clean delivery %d: handler calls under twice, want GoChannel's %v", i+1, real)
			}
		})
	}
}

// goChannelCalls runs the outcomes through a real router on GoChannel and
// returns the outcome of each call until the message is acked.
func goChannelCalls(t *testing.T, outcomes []outcome, mws []func() message.HandlerMiddleware) []outcome {
	t.Helper()
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	for _, m := range mws {
		r.AddMiddleware(m())
	}
	var mu sync.Mutex
	var calls []outcome
	r.AddConsumerHandler("conformance", "topic", pubSub, func(*message.Message) error {
		mu.Lock()
		o := ok
		if len(calls) < len(outcomes) {
			o = outcomes[len(calls)]
		}
		calls = append(calls, o)
		mu.Unlock()
		return act(o)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	require.NoError(t, pubSub.Publish("topic", message.NewMessage("m-1", []byte(`{}`))), "published and acked")
	require.NoError(t, r.Close())
	mu.Lock()
	defer mu.Unlock()
	return append([]outcome(nil), calls...)
}

// harnessCalls runs the outcomes through twicewatermill's Job and returns
// the number of handler calls of each clean first delivery.
func harnessCalls(t *testing.T, outcomes []outcome, mws []func() message.HandlerMiddleware) []int {
	t.Helper()
	var mu sync.Mutex
	var perDelivery []*int
	job := twicewatermill.Job("conformance", []byte(`{}`), nil, func(d *harness.Delivery) message.HandlerFunc {
		n := new(int)
		if d.Kind == "first" && d.JobID == "1" {
			mu.Lock()
			perDelivery = append(perDelivery, n)
			mu.Unlock()
		}
		return func(msg *message.Message) ([]*message.Message, error) {
			i := *n
			*n++
			o := ok
			if i < len(outcomes) {
				o = outcomes[i]
			}
			if _, err := d.DB.Exec(msg.Context(), `UPDATE accounts SET points = 50 WHERE id = 7`); err != nil {
				return nil, err
			}
			return nil, act(o)
		}
	}, twicewatermill.Middleware(mws...))
	res, err := harness.Run(context.Background(), job, harness.Config{Setup: accounts.Setup, Faults: []faults.Fault{faults.RunTwice()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	mu.Lock()
	defer mu.Unlock()
	var out []int
	for _, n := range perDelivery {
		out = append(out, *n)
	}
	return out
}
