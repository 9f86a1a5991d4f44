package effects

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/goid"
	"github.com/runtwice/twice/internal/http2"
)

// The process's own HTTP client reaches the providers of the delivery
// that calls it. Production sets SDKs up once per process: stripe-go's
// package-level calls (stripe.Key, paymentintent.New) go through
// stripe-go's default *http.Client, whose Transport is nil, and so do
// http.Get and http.DefaultClient; all of them end in
// http.DefaultTransport. The router is registered on that Transport for
// "http" and "https" (http.Transport.RegisterProtocol, which net/http
// calls in the caller's goroutine before it dials): a request made in a
// handler's goroutine, or in a goroutine the handler started, goes to
// that delivery's providers as its HTTPClient's requests do; any other
// request, and one for a server on this machine (a test's own httptest
// server), gets http.ErrSkipAltProtocol and goes to the network as
// before. Under concurrent deliveries each call goes to its own
// delivery, with no code from the user.
//
// Limits: a goroutine is known by the goroutine that started it, from
// the runtime's stack traces; a request from a goroutine the handler did
// not start (a worker pool the SDK started at init) is not routed. A
// client with a Transport of its own (the AWS SDK v2's default, built per
// config) is not http.DefaultTransport: give it Delivery.HTTPClient, or,
// for a config loaded once per process, http.DefaultClient.

// router is the process's one route table.
var router = &routes{byGoroutine: map[uint64]*route{}, pruneAt: pruneAt, open: map[*Log][]uint64{}}

type routes struct {
	on  http.RoundTripper // the http.DefaultTransport the routes are registered on
	err error             // why they could not be

	mu          sync.Mutex
	byGoroutine map[uint64]*route // a handler's goroutine, or one it started, to its delivery
	pruneAt     int
	open        map[*Log][]uint64 // the goroutines routed to each log whose scenario runs
}

// route is where one goroutine's requests go: c, or, once the scenario
// is over, nowhere (c nil: the call fails). It keeps no Clients past
// the scenario, which would keep the scenario's execution and workers
// from the garbage collector.
type route struct {
	c     *Clients
	label string // the delivery's, for the error
}

// The routes are registered as the package is initialised, before any
// request can have set up the Transport's HTTP/2, which takes "https"
// for itself (RegisterProtocol is the one Transport change net/http
// allows once it is in use, and it panics on a scheme taken). For the
// same reason the default transport is set to HTTP/1.1 here, before any
// use: its HTTP/2 would try to take "https", fail and log it. The price:
// the test binary's http.DefaultTransport speaks HTTP/1.1 to TLS
// servers.
func init() {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		router.err = fmt.Errorf("http.DefaultTransport is a %T, not net/http's *http.Transport", http.DefaultTransport)
		return
	}
	if t.Protocols == nil || t.Protocols.HTTP2() {
		var p http.Protocols
		p.SetHTTP1(true)
		t.Protocols = &p
	}
	router.on, router.err = t, register(t, "https", "http")
}

// register registers the router on t for schemes; RegisterProtocol
// panics on a scheme already registered.
func register(t *http.Transport, schemes ...string) (err error) {
	for _, s := range schemes {
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = errors.Join(err, fmt.Errorf("it has a RoundTripper registered for %q already (%v)", s, p))
				}
			}()
			t.RegisterProtocol(s, &http2.Transport{RoundTripper: router})
		}()
	}
	return err
}

// RouteDefaultTransport reports whether the process's default HTTP
// client reaches the calling delivery's providers: an error when
// http.DefaultTransport could not take the routes, or was replaced
// since. The harness refuses to run a check then: a job's call through
// http.DefaultClient or stripe-go's package-level functions would go to
// the network, where twice cannot see it.
func RouteDefaultTransport() error {
	err := router.err
	if err == nil && http.DefaultTransport != router.on {
		err = fmt.Errorf("http.DefaultTransport was replaced (by a %T) after twice registered its routes on net/http's", http.DefaultTransport)
	}
	if err != nil {
		return blame.Userf("the process's default HTTP client cannot be sent to the scenario's providers: %w; a job's calls through http.DefaultClient, http.Get or stripe-go's package-level functions would reach the network, where twice cannot see them. Leave http.DefaultTransport as net/http makes it in the test binary, and give the job's own clients Delivery.HTTPClient", err)
	}
	return nil
}

// Route sends the requests the calling goroutine, and goroutines it
// starts, make through http.DefaultTransport to c's providers; once the
// scenario's log is closed they fail. The harness calls it in each
// handler's goroutine, after RouteDefaultTransport.
func (c *Clients) Route() {
	id := goid.ID()
	if id == 0 {
		return
	}
	router.remember(c, id)
}

// closed notes that l's scenario is over, and drops, once the table has
// grown past pruneAt, the routes of goroutines that have ended. A route
// outlives its scenario: a dead delivery's handler, which Go cannot stop,
// may call on after its scenario is over, and its call must fail, not
// reach the network.
func (r *routes) closed(l *Log) {
	r.mu.Lock()
	for _, id := range r.open[l] {
		if rt := r.byGoroutine[id]; rt != nil {
			rt.c = nil
		}
	}
	delete(r.open, l)
	r.mu.Unlock()
	r.prune()
}

// prune drops, once the table has grown past pruneAt, the routes of
// goroutines that have ended.
func (r *routes) prune() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byGoroutine) < r.pruneAt {
		return
	}
	live := goid.Creators(goid.Dump()) // every goroutine that has a creator
	for id := range r.byGoroutine {
		if _, ok := live[id]; !ok {
			delete(r.byGoroutine, id)
		}
	}
	r.pruneAt = max(pruneAt, 2*len(r.byGoroutine))
}

// pruneAt is the table size that first sets prune to work.
const pruneAt = 4096

// RoundTrip sends req to the providers of the delivery whose goroutine
// makes it, or, from any other goroutine, lets net/http make it. A
// delivery whose scenario is over gets an error: the call is not made.
func (r *routes) RoundTrip(req *http.Request) (*http.Response, error) {
	if local(req) {
		return nil, http.ErrSkipAltProtocol
	}
	rt := r.lookup()
	if rt == nil {
		return nil, http.ErrSkipAltProtocol
	}
	r.mu.Lock()
	c := rt.c
	r.mu.Unlock()
	if c == nil || c.log.isClosed() {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, blame.Userf("%s %s from delivery %s, whose scenario is over (its worker died, or it returned): the call is not made", req.Method, req.URL.Redacted(), rt.label)
	}
	return c.HTTPTransport().RoundTrip(req)
}

// local reports whether req is for a server on this machine (a test's
// own httptest server, a local mail catcher) and not made from
// HTTPBaseURL: the test set that server up, so the request goes to it as
// before, not to the scenario's providers.
func local(req *http.Request) bool {
	if strings.HasPrefix(req.URL.Path, baseURLPrefix) {
		return false
	}
	host := req.URL.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxDepth bounds the walk up from a goroutine to the handler's.
const maxDepth = 64

// lookup finds the delivery of the calling goroutine: its own route, its
// creator's (from its own stack), or, failing those, an ancestor's from
// a dump of every goroutine's stack. What it finds is remembered.
func (r *routes) lookup() *route {
	r.mu.Lock()
	empty := len(r.byGoroutine) == 0
	r.mu.Unlock()
	if empty {
		return nil // no check runs: no stack is read
	}
	id := goid.ID()
	if c := r.of(id); c != nil {
		return c
	}
	creator := goid.Creator()
	if creator == 0 {
		return nil
	}
	if rt := r.of(creator); rt != nil {
		r.inherit(rt, id)
		return rt
	}
	r.mu.Lock()
	running := len(r.open) > 0
	r.mu.Unlock()
	if !running {
		// No scenario runs: a goroutine two or more generations below a
		// handler of one that ended is not looked for (a dump of every
		// stack per request of the process's own code).
		return nil
	}
	creators := goid.Creators(goid.Dump())
	line := []uint64{id}
	for g := creator; g != 0 && len(line) < maxDepth; g = creators[g] {
		if rt := r.of(g); rt != nil {
			r.inherit(rt, line...)
			return rt
		}
		line = append(line, g)
	}
	return nil
}

func (r *routes) of(id uint64) *route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byGoroutine[id]
}

// remember routes goroutines ids to c.
func (r *routes) remember(c *Clients, ids ...uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.byGoroutine[id] = &route{c: c, label: c.label}
	}
	r.open[c.log] = append(r.open[c.log], ids...)
}

// inherit routes goroutines ids where rt goes.
func (r *routes) inherit(rt *route, ids ...uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.byGoroutine[id] = &route{c: rt.c, label: rt.label}
	}
	if rt.c != nil {
		r.open[rt.c.log] = append(r.open[rt.c.log], ids...)
	}
}
