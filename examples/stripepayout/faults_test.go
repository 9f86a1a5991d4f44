package stripepayout_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/stripe/stripe-go/v82"
)

// stripeClientAt is stripeClient on hc against url, the way a real
// timeout is measured here.
func stripeClientAt(hc *http.Client, url string) *stripe.Client {
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:           stripe.String(url),
		HTTPClient:    hc,
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	for _, b := range []stripe.Backend{backends.API, backends.Connect, backends.Uploads, backends.MeterEvents} {
		if impl, ok := b.(*stripe.BackendImplementation); ok {
			impl.SetNetworkRetriesSleep(false)
		}
	}
	return stripe.NewClient("sk_test_twice", stripe.WithBackends(backends))
}

func newLogWith(t *testing.T, p effects.Providers) *effects.Log {
	t.Helper()
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	log, err := effects.NewLog(func() time.Time { return at }, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return log
}

// stripe-go treats an answer that comes after its client's timeout
// (effects.AnsweredLate) as it treats a real Client.Timeout: measured
// against a real server whose first answer is late for a client with a
// 20ms timeout, both retry once with the same key and succeed; under the
// fault Stripe replays the transfer the late attempt made.
func TestSlowAnswerIsStripeGosTimeout(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			_, _ = io.Copy(io.Discard, r.Body) // read to its end, the server sees the client go
			select {                           // late: the client gives up first
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"tr_real","object":"transfer","amount":8400000,"currency":"inr"}`))
	}))
	defer srv.Close()
	real, err := stripeClientAt(&http.Client{Timeout: 20 * time.Millisecond}, srv.URL).V1Transfers.Create(context.Background(), transfer(84_000_00, ""))
	if err != nil {
		t.Fatalf("real timeout: %v, want stripe-go's retry to succeed", err)
	}
	mu.Lock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] || real.ID != "tr_real" {
		t.Fatalf("real timeout: keys %q, transfer %s; want two attempts with one key", keys, real.ID)
	}
	mu.Unlock()

	log := newLog(t)
	sc := stripeClient(log.Clients("j1a1w1", "1", 1, &replies{next: []effects.Reply{effects.AnsweredLate}}).HTTPClient())
	tr, err := sc.V1Transfers.Create(context.Background(), transfer(84_000_00, ""))
	if err != nil {
		t.Fatalf("late answer: %v, want stripe-go's retry to succeed as on a real timeout", err)
	}
	effs := log.Effects()
	if len(effs) != 2 || !effs[0].Happened() || !effs[0].ReplyLost || !effs[1].Replayed || effs[0].Key != effs[1].Key || tr.ID != "tr_1" {
		t.Errorf("late answer: transfer %s, effects %+v; want tr_1 made late, then replayed to the retry with its key", tr.ID, effs)
	}
}

// Stripe's 429 rate_limit, with its JSON body, is not retried by
// stripe-go: the handler gets a *stripe.Error. A 503 in plain text, as a
// load balancer answers (HTTPHost.Refusal RefuseUnavailable), is retried
// within the call with the same key, and the call succeeds.
func TestRefusalsAsStripeMakesThem(t *testing.T) {
	t.Run("429 rate_limit", func(t *testing.T) {
		log := newLog(t)
		sc := stripeClient(log.Clients("j1a1w1", "1", 1, &replies{next: []effects.Reply{effects.Refused}}).HTTPClient())
		_, err := sc.V1Transfers.Create(context.Background(), transfer(84_000_00, "payout-381-W42"))
		var se *stripe.Error
		if !errors.As(err, &se) || se.HTTPStatusCode != 429 || se.Code != stripe.ErrorCodeRateLimit {
			t.Fatalf("err = %v, want Stripe's 429 rate_limit", err)
		}
		if effs := log.Effects(); len(effs) != 1 || effs[0].Happened() {
			t.Errorf("effects = %+v, want one refused attempt, not retried", effs)
		}
	})
	t.Run("503 unavailable", func(t *testing.T) {
		log := newLogWith(t, effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
			effects.StripeHost: {Stripe: true, Refusal: effects.RefuseUnavailable},
		}}})
		sc := stripeClient(log.Clients("j1a1w1", "1", 1, &replies{next: []effects.Reply{effects.Refused}}).HTTPClient())
		tr, err := sc.V1Transfers.Create(context.Background(), transfer(84_000_00, ""))
		if err != nil {
			t.Fatalf("err = %v, want stripe-go's retry of the 503 to succeed", err)
		}
		effs := log.Effects()
		if len(effs) != 2 || effs[0].Happened() || !effs[1].Happened() || effs[0].Key == "" || effs[0].Key != effs[1].Key || tr.ID != "tr_1" {
			t.Errorf("transfer %s, effects %+v; want a refused attempt, then tr_1 with the same key", tr.ID, effs)
		}
	})
}

// Under the real executor the default matrix's outage on the POST loses
// stripe-go's retries with the call's key too: Create fails, the job's
// error path runs, and the queue's retry with the job's key gets Stripe's
// replay of the one transfer.
func TestOutageReachesTheHandler(t *testing.T) {
	cfg := config
	cfg.Faults = []faults.Fault{faults.EffectLostReplies()}
	res, err := harness.Run(context.Background(), withJobKey, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != result.OutcomeIdempotent || len(res.Scenarios) != 1 {
		t.Fatalf("Outcome = %s with %d scenarios, want one idempotent: %v", res.Outcome, len(res.Scenarios), res.Failed())
	}
	s := res.Scenarios[0]
	if s.Schedule.String() != "j1a1w1!outage:1" {
		t.Errorf("schedule = %s, want j1a1w1!outage:1", s.Schedule)
	}
	first := s.Deliveries[0]
	if !strings.Contains(first.Err, "paying restaurant 381") {
		t.Errorf("first delivery returned %q, want the job's error from Create", first.Err)
	}
	lost, made := 0, 0
	for _, e := range s.Effects {
		if e.Delivery == first.Delivery.Label() && e.ReplyLost {
			lost++
		}
		if e.Happened() && !e.Replayed {
			made++
		}
	}
	if lost != 3 || made != 1 {
		t.Errorf("first delivery lost %d answers, %d transfers made; want 3 (stripe-go's 2 retries) and 1: %+v", lost, made, s.Effects)
	}
}
