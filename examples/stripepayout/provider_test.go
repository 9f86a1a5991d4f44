package stripepayout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/stripe/stripe-go/v82"
)

// replies is a Steps that gives each effect call the next reply, or kills the
// delivery when dead is set.
type replies struct {
	next  []effects.Reply
	dead  error
	calls int
}

func (f *replies) Begin(context.Context, faults.Step) (effects.Reply, error) {
	f.calls++
	if f.dead != nil {
		return 0, f.dead
	}
	if len(f.next) == 0 {
		return effects.Answered, nil
	}
	reply := f.next[0]
	f.next = f.next[1:]
	return reply, nil
}

func (f *replies) End(faults.Step) {}

// newLog is one scenario's effect log on a fixed clock, closed with the
// test.
func newLog(t *testing.T) *effects.Log {
	t.Helper()
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	log, err := effects.NewLog(func() time.Time { return at }, effects.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return log
}

func transfer(amount int64, key string) *stripe.TransferCreateParams {
	p := &stripe.TransferCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String("inr"), Destination: stripe.String("acct_restaurant_381")}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

// The same key with another amount is Stripe's idempotency_error, a 400
// stripe-go decodes into a *stripe.Error and does not retry.
func TestSameKeyOtherAmountIsStripesError(t *testing.T) {
	log := newLog(t)
	sc := stripeClient(log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient())
	ctx := context.Background()
	first, err := sc.V1Transfers.Create(ctx, transfer(84_000_00, "payout-381-W42"))
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != "tr_1" || first.Amount != 84_000_00 || first.Destination == nil || first.Destination.ID != "acct_restaurant_381" {
		t.Errorf("transfer = %+v, want tr_1 of 8400000 to acct_restaurant_381", first)
	}
	_, err = sc.V1Transfers.Create(ctx, transfer(85_000_00, "payout-381-W42"))
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *stripe.Error", err)
	}
	if se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != 400 {
		t.Errorf("error = %s %d, want idempotency_error 400", se.Type, se.HTTPStatusCode)
	}
	again, err := sc.V1Transfers.Create(ctx, transfer(84_000_00, "payout-381-W42"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same key and amount = %s (Idempotent-Replayed %q), want %s replayed", again.ID, again.LastResponse.Header.Get("Idempotent-Replayed"), first.ID)
	}
	effs := log.Effects()
	if len(effs) != 3 || !effs[0].Happened() || effs[1].Happened() || effs[1].Err == "" || !effs[2].Replayed {
		t.Errorf("effects = %+v, want made, refused (idempotency_error), replayed", effs)
	}
}

// Losing the answer of every attempt, stripe-go's two retries included,
// reaches the job's error path: Create fails. Stripe made one transfer
// and replayed it to the retries with the same key.
func TestEveryAttemptLostReachesTheHandler(t *testing.T) {
	log := newLog(t)
	steps := &replies{next: []effects.Reply{effects.ReplyLost, effects.ReplyLost, effects.ReplyLost}}
	sc := stripeClient(log.Clients("j1a1w1", "1", 1, steps).HTTPClient())
	_, err := sc.V1Transfers.Create(context.Background(), transfer(84_000_00, ""))
	if err == nil {
		t.Fatal("Create succeeded with every answer lost")
	}
	effs := log.Effects()
	if len(effs) != 3 {
		t.Fatalf("%d attempts recorded, want 3 (stripe-go's MaxNetworkRetries 2): %+v", len(effs), effs)
	}
	made := 0
	for _, e := range effs {
		if !e.ReplyLost || e.Key == "" || e.Key != effs[0].Key {
			t.Errorf("attempt %+v: want its answer lost, with the first attempt's key", e)
		}
		if e.Happened() {
			made++
		}
	}
	if made != 1 {
		t.Errorf("%d transfers made, want 1 (the retries replayed)", made)
	}
}

// A dead delivery's requests are refused before they reach Stripe, and
// not recorded.
func TestDeadDeliveryRequestsRefused(t *testing.T) {
	log := newLog(t)
	dead := errors.New("j1a1w1 is dead")
	steps := &replies{dead: dead}
	sc := stripeClient(log.Clients("j1a1w1", "1", 1, steps).HTTPClient())
	_, err := sc.V1Transfers.Create(context.Background(), transfer(84_000_00, "payout-381-W42"))
	if !errors.Is(err, dead) {
		t.Errorf("err = %v, want the delivery's death", err)
	}
	if effs := log.Effects(); len(effs) != 0 {
		t.Errorf("effects = %+v, want none", effs)
	}
	if steps.calls != 1 {
		t.Errorf("%d steps asked, want 1: after it the transport refuses at once", steps.calls)
	}
	// The provider made nothing: a live delivery with the same key pays.
	tr, err := stripeClient(log.Clients("j1a2w2", "1", 2, &replies{}).HTTPClient()).V1Transfers.Create(context.Background(), transfer(84_000_00, "payout-381-W42"))
	if err != nil || tr.LastResponse.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("next delivery: %v, replayed %q; want a new transfer", err, tr.LastResponse.Header.Get("Idempotent-Replayed"))
	}
}
