package effects_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/runtwice/twice/harness/effects"
)

// getDefault makes a request with the process's default client, as code
// set up once per process does.
func postDefault(t *testing.T, url string) (int, error) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"n": 1}`))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Requests made with http.DefaultClient in a handler's goroutine, and in
// goroutines it started (at any depth), reach that delivery's providers,
// each delivery its own under concurrent deliveries; a request from any
// other goroutine goes to the network as before, and once the log is
// closed a call from the handler's goroutine fails, never reaching the
// network: a dead delivery's handler may call on.
func TestDefaultClientReachesTheCallingDelivery(t *testing.T) {
	if err := effects.RouteDefaultTransport(); err != nil {
		t.Fatal(err)
	}
	var network atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { network.Add(1) }))
	defer srv.Close()

	logs := []*effects.Log{httpLog(t, effects.Providers{}), httpLog(t, effects.Providers{})}
	var wg sync.WaitGroup
	for i, log := range logs {
		wg.Go(func() { // delivery i's handler
			log.Clients([]string{"j1a1w1", "j1a2w2"}[i], "1", 1, &replies{}).Route()
			if _, err := postDefault(t, "https://hooks.example.com/direct"); err != nil {
				t.Error(err)
			}
			// The test's own server, on this machine, gets its request.
			if code, err := postDefault(t, srv.URL+"/local"); err != nil || code != http.StatusOK {
				t.Errorf("a request from the handler to a local server: %d, %v; want it sent there", code, err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				inner := make(chan struct{})
				go func() { // a grandchild, whose creator never called
					defer close(inner)
					if _, err := postDefault(t, "https://hooks.example.com/grandchild"); err != nil {
						t.Error(err)
					}
				}()
				<-inner
			}()
			<-done
		})
	}
	wg.Wait()
	if code, err := postDefault(t, srv.URL+"/other"); err != nil || code != http.StatusOK || network.Load() != 3 {
		t.Errorf("a request from the test's own goroutine: %d, %v, %d at the server; want it and the handlers' local ones sent there", code, err, network.Load())
	}
	for i, log := range logs {
		effs := log.Effects()
		if len(effs) != 2 {
			t.Fatalf("delivery %d's log holds %d effects, want its own 2: %v", i+1, len(effs), effs)
		}
		for _, e := range effs {
			if want := []string{"j1a1w1", "j1a2w2"}[i]; e.Delivery != want || e.Kind != "hooks.example.com" {
				t.Errorf("delivery %d's log holds %+v, want %s's call to hooks.example.com", i+1, e, want)
			}
		}
	}

	log := httpLog(t, effects.Providers{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		log.Clients("j1a1w1", "1", 1, &replies{}).Route()
		if err := log.Close(); err != nil {
			t.Error(err)
		}
		_, err := postDefault(t, "https://hooks.example.com/after")
		if err == nil || !strings.Contains(err.Error(), "scenario is over") {
			t.Errorf("a call from the delivery after its log closed: %v; want it refused, not sent", err)
		}
	}()
	<-done
	if n := len(log.Effects()); n != 0 || network.Load() != 3 {
		t.Errorf("after the log closed: %d effects, %d requests at the server; want 0 and 3", n, network.Load())
	}
}
