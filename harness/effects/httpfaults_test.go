package effects_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/harness/effects"
)

// slowServer answers only once its client gave up (or after 5s,
// so that nothing hangs).
func slowServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // read to its end, the server sees the client go
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// An answer that comes after the client's timeout is, to net/http, that
// timeout: the error a real http.Client.Timeout makes, word for word, a
// net.Error whose Timeout is true, matching context.DeadlineExceeded,
// with no wait. net/http's Transport does not replay it (as it replays a
// cut connection for a request with an Idempotency-Key): one attempt,
// made by the provider.
func TestHTTPSlowAnswerIsTheClientsTimeout(t *testing.T) {
	srv := slowServer(t)
	real := &http.Client{Timeout: 20 * time.Millisecond}
	_, realErr := post(t, real, srv.URL+"/a", "k1", `{}`)
	if realErr == nil {
		t.Fatal("the real client did not time out")
	}

	log := httpLog(t, effects.Providers{})
	steps := &replies{next: []effects.Reply{effects.Answered, effects.AnsweredLate}}
	c := log.Clients("j1a1w1", "1", 1, steps).HTTPClient()
	if _, err := post(t, c, "https://hooks.example.com/a", "k0", `{}`); err != nil {
		t.Fatal(err) // the connection is now kept alive: a cut one would be replayed
	}
	_, err := post(t, c, "https://hooks.example.com/a", "k1", `{}`)
	if err == nil {
		t.Fatal("POST succeeded with its answer after the client's timeout")
	}
	if want := strings.Replace(realErr.Error(), srv.URL, "https://hooks.example.com", 1); err.Error() != want {
		t.Errorf("err = %q, want the real client's %q", err, want)
	}
	var realNet, gotNet net.Error
	if !errors.As(realErr, &realNet) || !realNet.Timeout() || !errors.As(err, &gotNet) || !gotNet.Timeout() {
		t.Errorf("Timeout: real %v, got %v; want both net.Errors that timed out", realErr, err)
	}
	if !errors.Is(realErr, context.DeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is DeadlineExceeded: real %v, got %v; want both", errors.Is(realErr, context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded))
	}
	if steps.calls != 2 {
		t.Errorf("%d attempts, want 2: net/http does not replay a timeout", steps.calls)
	}
	effs := log.Effects()
	if len(effs) != 2 || !effs[1].Happened() || !effs[1].ReplyLost || effs[1].Key != "k1" {
		t.Errorf("effects = %+v, want the second made with its answer lost to the client", effs)
	}
}

// A host refuses under an effect-failed fault as its HTTPHost.Refusal
// says: by default 429 with Stripe's JSON rate_limit on a Stripe host,
// 503 in plain text elsewhere; either can be asked for on either.
func TestHTTPRefusalPerHost(t *testing.T) {
	tests := []struct {
		name        string
		host        effects.HTTPHost
		url         string
		status      int
		contentType string
		bodyHas     string
	}{
		{"generic default", effects.HTTPHost{}, "https://hooks.example.com/a", 503, "text/plain", "503 service unavailable"},
		{"generic rate limit", effects.HTTPHost{Refusal: effects.RefuseRateLimit}, "https://hooks.example.com/a", 429, "text/plain", "429 too many requests"},
		{"stripe default", effects.HTTPHost{Stripe: true}, "https://api.stripe.com/v1/transfers", 429, "application/json", `"code":"rate_limit"`},
		{"stripe unavailable", effects.HTTPHost{Stripe: true, Refusal: effects.RefuseUnavailable}, "https://api.stripe.com/v1/transfers", 503, "text/plain", "503 service unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := strings.Split(strings.TrimPrefix(tt.url, "https://"), "/")[0]
			log := httpLog(t, effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{host: tt.host}}})
			c := log.Clients("j1a1w1", "1", 1, &replies{next: []effects.Reply{effects.Refused}}).HTTPClient()
			req, err := http.NewRequest(http.MethodPost, tt.url, strings.NewReader("amount=1"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			raw, _ := io.ReadAll(resp.Body)
			body := string(raw)
			if resp.StatusCode != tt.status || resp.Header.Get("Retry-After") == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.contentType) || !strings.Contains(body, tt.bodyHas) {
				t.Errorf("answer = %d %q (Retry-After %q) %q; want %d %s with Retry-After and %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), body, tt.status, tt.contentType, tt.bodyHas)
			}
			if effs := log.Effects(); len(effs) != 1 || effs[0].Happened() {
				t.Errorf("effects = %+v, want one refused", effs)
			}
		})
	}
}

// A refusal that names no kind is refused with the choices.
func TestHTTPRefusalUnknown(t *testing.T) {
	_, err := effects.NewLog(time.Now, effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		"hooks.example.com": {Refusal: effects.HTTPRefusal(9)},
	}}})
	if err == nil || !strings.Contains(err.Error(), "effects.RefuseUnavailable") {
		t.Errorf("err = %v, want the unknown refusal refused with the choices", err)
	}
}

// A call's step says whether its client waited with a deadline, from
// http.Client.Timeout or the request's own context: the default matrix
// answers only those slowly (faults.EffectSlowAnswers). The header that
// tells the provider so is not part of the request it records.
func TestHTTPStepSaysWhetherTheClientHasADeadline(t *testing.T) {
	log := httpLog(t, effects.Providers{})
	steps := &replies{}
	c := log.Clients("j1a1w1", "1", 1, steps).HTTPClient()
	if _, err := post(t, c, "https://hooks.example.com/a", "", `{}`); err != nil {
		t.Fatal(err)
	}
	c.Timeout = 10 * time.Second
	if _, err := post(t, c, "https://hooks.example.com/b", "", `{}`); err != nil {
		t.Fatal(err)
	}
	c.Timeout = 0
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://hooks.example.com/c", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()

	var got []bool
	for _, s := range steps.steps {
		got = append(got, s.Deadline)
		if !s.HTTP {
			t.Errorf("step %q is not marked HTTP", s.SQL)
		}
	}
	if len(got) != 3 || got[0] || !got[1] || !got[2] {
		t.Errorf("Deadline per call = %v, want [false true true]", got)
	}
	for _, e := range log.Effects() {
		if strings.Contains(strings.ToLower(string(e.Payload)), "twice") {
			t.Errorf("the recorded request carries twice's header: %s", e.Payload)
		}
	}
}
