package effects_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
)

// replies gives each effect call the next reply (Answered once they run
// out), or kills the delivery when dead is set.
type replies struct {
	next  []effects.Reply
	dead  error
	calls int
	steps []faults.Step // the steps asked for, in order
}

func (f *replies) Begin(_ context.Context, s faults.Step) (effects.Reply, error) {
	f.calls++
	f.steps = append(f.steps, s)
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

func httpLog(t *testing.T, p effects.Providers) *effects.Log {
	t.Helper()
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	log, err := effects.NewLog(func() time.Time { return at }, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return log
}

// answer is what post read of a response, its body drained and closed.
type answer struct {
	StatusCode int
	Header     http.Header
}

func post(t *testing.T, c *http.Client, url, key, body string) (answer, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, nil
}

// Every request is an effect of kind host, with its method, path and
// JSON body decoded into fields; the generic provider answers 200 and
// deduplicates nothing.
func TestHTTPGenericRecordsEveryRequest(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	c := log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient()
	for range 2 {
		resp, err := post(t, c, "https://hooks.example.com/orders", "k1", `{"order": 9812, "status": "paid"}`)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST = %v, %v; want 200", resp, err)
		}
	}
	effs := log.Effects()
	if len(effs) != 2 {
		t.Fatalf("effects = %+v, want 2", effs)
	}
	want := `{"method":"POST","path":"/orders","body":{"order":9812,"status":"paid"}}`
	for _, e := range effs {
		if e.Kind != "hooks.example.com" || e.Key != "k1" || string(e.Payload) != want || !e.Happened() {
			t.Errorf("effect = %s %s %s happened %v, want hooks.example.com k1 %s", e.Kind, e.Key, e.Payload, e.Happened(), want)
		}
	}
}

// A host set to Dedup replays its saved answer with Idempotent-Replayed,
// refuses the key with another body, and the kind and key header are the
// host's.
func TestHTTPGenericDedup(t *testing.T) {
	calls := 0
	log := httpLog(t, effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		"api.mail.example": {Kind: "email", Dedup: true, Answer: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			calls++
			w.WriteHeader(http.StatusAccepted)
		})},
	}}})
	c := log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient()
	r1, err := post(t, c, "https://api.mail.example/send", "m1", `{"to":"asha@example.com"}`)
	if err != nil || r1.StatusCode != 202 {
		t.Fatalf("first = %v, %v", r1, err)
	}
	r2, err := post(t, c, "https://api.mail.example/send", "m1", `{"to":"asha@example.com"}`)
	if err != nil || r2.StatusCode != 202 || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %v, %v; want 202 replayed", r2, err)
	}
	r3, err := post(t, c, "https://api.mail.example/send", "m1", `{"to":"ravi@example.com"}`)
	if err != nil || r3.StatusCode != 400 {
		t.Fatalf("other body, same key = %v, %v; want 400", r3, err)
	}
	if calls != 1 {
		t.Errorf("provider ran %d times, want 1", calls)
	}
	effs := log.Effects()
	if len(effs) != 3 || effs[0].Kind != "email" || !effs[0].Happened() || !effs[1].Replayed || effs[2].Happened() {
		t.Errorf("effects = %+v, want made, replayed, refused", effs)
	}
}

// A lost reply: the provider did the work and the connection is cut. On
// a connection net/http reused, its own Transport replays a request that
// carries an Idempotency-Key (isReplayable), so the caller never sees the
// loss and the provider sees a second attempt; without the key the
// caller gets the error.
func TestHTTPLostReplyKeepsNetHTTPReplay(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       string
		wantErr   bool
		attempts  int
		secondRun bool
	}{
		{name: "with key: net/http replays", key: "k1", attempts: 3},
		{name: "without key: the caller hears it", wantErr: true, attempts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := httpLog(t, effects.Providers{})
			steps := &replies{next: []effects.Reply{effects.Answered, effects.ReplyLost}}
			c := log.Clients("j1a1w1", "1", 1, steps).HTTPClient()
			if _, err := post(t, c, "https://hooks.example.com/a", "", `{}`); err != nil {
				t.Fatal(err) // opens the connection the next request reuses
			}
			_, err := post(t, c, "https://hooks.example.com/b", tc.key, `{}`)
			if (err != nil) != tc.wantErr {
				t.Fatalf("second POST err = %v, want error %v", err, tc.wantErr)
			}
			effs := log.Effects()
			if len(effs) != tc.attempts || !effs[1].ReplyLost {
				t.Errorf("effects = %+v, want %d with the second's reply lost", effs, tc.attempts)
			}
		})
	}
}

// A refusal is a 503 with Retry-After, recorded as not made.
func TestHTTPRefused(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	c := log.Clients("j1a1w1", "1", 1, &replies{next: []effects.Reply{effects.Refused}}).HTTPClient()
	resp, err := post(t, c, "https://hooks.example.com/a", "", `{}`)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST = %v, %v; want 503 with Retry-After", resp, err)
	}
	if effs := log.Effects(); len(effs) != 1 || effs[0].Happened() {
		t.Errorf("effects = %+v, want one refused", effs)
	}
}

// A dead delivery's requests fail with its death, never reach the
// provider and are not recorded.
func TestHTTPDeadDeliveryRefused(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	dead := errors.New("j1a1w1 is dead")
	steps := &replies{dead: dead}
	c := log.Clients("j1a1w1", "1", 1, steps).HTTPClient()
	for range 2 {
		if _, err := post(t, c, "https://hooks.example.com/a", "k", `{}`); !errors.Is(err, dead) {
			t.Errorf("err = %v, want the delivery's death", err)
		}
	}
	if effs := log.Effects(); len(effs) != 0 {
		t.Errorf("effects = %+v, want none", effs)
	}
	if steps.calls != 1 {
		t.Errorf("%d steps asked, want 1: the transport refuses at once after the first", steps.calls)
	}
}

// A form body is recorded field by field, as a JSON one.
func TestHTTPFormBody(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	c := log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient()
	resp, err := c.PostForm("https://hooks.example.com/f?x=1", map[string][]string{"b": {"2"}, "a": {"1", "3"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	want := `{"method":"POST","path":"/f","query":{"x":"1"},"body":{"a":["1","3"],"b":"2"}}`
	if effs := log.Effects(); len(effs) != 1 || string(effs[0].Payload) != want {
		t.Errorf("effects = %+v, want payload %s", effs, want)
	}
}

// A request with a URL from HTTPBaseURL reaches the host it names.
func TestHTTPBaseURL(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	cl := log.Clients("j1a1w1", "1", 1, &replies{})
	if _, err := post(t, cl.HTTPClient(), cl.HTTPBaseURL("sqs.eu-west-1.amazonaws.com")+"/queue", "", `{}`); err != nil {
		t.Fatal(err)
	}
	if effs := log.Effects(); len(effs) != 1 || effs[0].Kind != "sqs.eu-west-1.amazonaws.com" || !strings.Contains(string(effs[0].Payload), `"path":"/queue"`) {
		t.Errorf("effects = %+v, want one to sqs.eu-west-1.amazonaws.com /queue", effs)
	}
}

func TestHTTPProvidersRefuseMeaninglessSettings(t *testing.T) {
	_, err := effects.NewLog(time.Now, effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		"api.stripe.com": {Stripe: true, Dedup: true},
	}}})
	if err == nil || !strings.Contains(err.Error(), "Stripe") {
		t.Errorf("err = %v, want Stripe with Dedup refused", err)
	}
}

// A request whose key is in flight gets a 409; once the first is done the
// key replays it.
func TestHTTPKeyInFlightIsAConflict(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	log := httpLog(t, effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		"api.example.com": {Dedup: true, Answer: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			close(entered)
			<-release
			w.WriteHeader(http.StatusCreated)
		})},
	}}})
	first := make(chan error, 1)
	go func() {
		a, err := post(t, log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient(), "https://api.example.com/x", "k", `{}`)
		if err == nil && a.StatusCode != 201 {
			err = errors.New(http.StatusText(a.StatusCode))
		}
		first <- err
	}()
	<-entered
	c2 := log.Clients("j1a2w2", "1", 2, &replies{}).HTTPClient()
	a, err := post(t, c2, "https://api.example.com/x", "k", `{}`)
	if err != nil || a.StatusCode != http.StatusConflict {
		t.Errorf("concurrent same key = %+v, %v; want 409", a, err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	a, err = post(t, c2, "https://api.example.com/x", "k", `{}`)
	if err != nil || a.StatusCode != 201 || a.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after the first = %+v, %v; want its 201 replayed", a, err)
	}
}

// Keys are remembered for the window on the harness clock: past it the
// same request runs again.
func TestHTTPKeyWindowOnTheHarnessClock(t *testing.T) {
	var mu sync.Mutex
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	log, err := effects.NewLog(now, effects.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	c := log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient()
	pay := func() answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "https://api.stripe.com/v1/payouts", strings.NewReader("amount=900&currency=eur"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_twice")
		req.Header.Set("Idempotency-Key", "payout-w42")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return answer{StatusCode: resp.StatusCode, Header: resp.Header}
	}
	for i, tc := range []struct {
		advance  time.Duration
		replayed bool
	}{{0, false}, {23 * time.Hour, true}, {time.Hour, false}} {
		mu.Lock()
		at = at.Add(tc.advance)
		mu.Unlock()
		a := pay()
		if a.StatusCode != 200 || (a.Header.Get("Idempotent-Replayed") == "true") != tc.replayed {
			t.Errorf("request %d: %d replayed %q, want 200 replayed %v", i+1, a.StatusCode, a.Header.Get("Idempotent-Replayed"), tc.replayed)
		}
	}
}

func newFormRequest(u string, form url.Values) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req, nil
}

// blocking is a Steps whose Begin waits until the call's context ends,
// then answers as the executor does: with the context's error.
type blocking struct {
	replies
	once    sync.Once
	entered chan struct{}
}

func (b *blocking) Begin(ctx context.Context, call faults.Step) (effects.Reply, error) {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.entered)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return b.replies.Begin(ctx, call)
}

// A client that gives up on one request while its step waits for the
// schedule loses that request only: the delivery is not dead, and its
// next request is made.
func TestHTTPClientGivingUpIsNotDeath(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	steps := &blocking{entered: make(chan struct{})}
	c := log.Clients("j1a1w1", "1", 1, steps).HTTPClient()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://hooks.example.com/a", strings.NewReader("{}"))
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	<-steps.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request err = %v, want context.Canceled", err)
	}
	// The cancelled request's handler may still be finishing: enough
	// later requests that one comes after it.
	const later = 20
	for i := range later {
		a, err := post(t, c, "https://hooks.example.com/b", "", `{}`)
		if err != nil || a.StatusCode != 200 {
			t.Fatalf("request %d after the cancelled one = %+v, %v; want 200", i+1, a, err)
		}
	}
	if effs := log.Effects(); len(effs) != later {
		t.Errorf("%d effects, want only the %d later requests", len(effs), later)
	}
}

// A GET is a step, with a step's faults, but no effect: it changes
// nothing at the provider. Its answer lost on a reused connection, net/http
// replays it by itself (a GET is idempotent): a third step, and the caller
// never hears of the loss.
func TestHTTPReadsAreStepsNotEffects(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	steps := &replies{next: []effects.Reply{effects.Answered, effects.ReplyLost}}
	c := log.Clients("j1a1w1", "1", 1, steps).HTTPClient()
	for _, u := range []string{"https://api.example.com/orders/9812", "https://api.example.com/orders/9813"} {
		resp, err := c.Get(u)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s = %v, %v; want 200", u, resp, err)
		}
		_ = resp.Body.Close()
	}
	if steps.calls != 3 {
		t.Errorf("%d steps, want 3: two GETs and net/http's replay of the lost one", steps.calls)
	}
	if effs := log.Effects(); len(effs) != 0 {
		t.Errorf("effects = %+v, want none for reads", effs)
	}
}
