package effects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
)

// deliveryHeader carries, from a delivery's transport to the scenario's
// listener, which delivery sent a request; the provider never sees it.
const deliveryHeader = "X-Twice-Delivery"

// baseURLPrefix starts the path of a URL made by HTTPBaseURL; the host it
// names follows.
const baseURLPrefix = "/twice-host/"

// httpSink is a scenario's HTTP providers: a real listener on 127.0.0.1
// that every delivery's transport dials, whatever host the request names,
// so net/http's own Transport (connection reuse, its replay of a request
// on a broken kept-alive connection) runs as in production.
type httpSink struct {
	log  *Log
	cfg  HTTPProviders
	ln   net.Listener
	srv  *http.Server
	addr string

	mu         sync.Mutex
	deliveries map[string]*httpDelivery
	transports []*http.Transport
	hosts      map[string]*httpHostState
}

// httpHostState is one host's memory in a scenario: its keys and, for the
// Stripe provider, its objects.
type httpHostState struct {
	setting HTTPHost
	keys    *keyStore[string, httpAnswer]
	stripe  *stripeState
}

// httpDelivery is one delivery's side of the sink.
type httpDelivery struct {
	c         *Clients
	sink      *httpSink
	token     string
	transport *http.Transport

	dead firstErr // the schedule refused a step: every later request fails with it
}

// startHTTP starts the scenario's listener.
func startHTTP(l *Log, cfg HTTPProviders) (*httpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, blame.Userf("HTTP providers: cannot listen on 127.0.0.1 (%w); the harness needs a local port for the providers behind Delivery.HTTPClient", err)
	}
	s := &httpSink{log: l, cfg: cfg, ln: ln, addr: ln.Addr().String(),
		deliveries: map[string]*httpDelivery{}, hosts: map[string]*httpHostState{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *httpSink) close() error {
	s.mu.Lock()
	ts := s.transports
	s.mu.Unlock()
	for _, t := range ts {
		t.CloseIdleConnections()
	}
	return s.srv.Close()
}

// delivery registers c and returns its side of the sink.
func (s *httpSink) delivery(c *Clients) *httpDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &httpDelivery{c: c, sink: s, token: strconv.Itoa(len(s.deliveries) + 1)}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	d.transport = &http.Transport{
		Proxy: nil, // never a proxy from the environment: the providers are local
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, s.addr)
		},
		MaxIdleConns:        100,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	s.deliveries[d.token] = d
	s.transports = append(s.transports, d.transport)
	return d
}

func (s *httpSink) hostState(host string) *httpHostState {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hosts[host]
	if h == nil {
		set := s.cfg.host(host)
		h = &httpHostState{setting: set, keys: newKeyStore[string, httpAnswer](set.KeyWindow)}
		if set.Stripe {
			h.stripe = newStripeState(set.StripeObjects)
		}
		s.hosts[host] = h
	}
	return h
}

// deliveryTransport is the http.RoundTripper of one delivery: it sends
// every request, on a real net/http Transport, to the scenario's
// listener, naming the host the request was for.
type deliveryTransport struct {
	d   *httpDelivery
	err error // the sink could not start
}

// RoundTrip implements http.RoundTripper.
func (t *deliveryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.err != nil {
		closeBody(req)
		return nil, t.err
	}
	if err := t.d.dead.get(); err != nil {
		closeBody(req)
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL.Scheme = "http"
	if strings.HasPrefix(req.URL.Path, baseURLPrefix) {
		// Made from HTTPBaseURL: already addressed to the listener.
		out.URL.Host = t.d.sink.addr
	} else {
		out.Host = req.URL.Host
		out.URL.Host = t.d.sink.addr
	}
	out.Header.Set(deliveryHeader, t.d.token)
	if _, ok := req.Context().Deadline(); ok {
		out.Header.Set(deadlineHeader, "1")
	}
	resp, err := t.d.transport.RoundTrip(out)
	if err != nil {
		if dead := t.d.dead.get(); dead != nil {
			return nil, dead
		}
		return nil, err
	}
	if resp.Header.Get(lateHeader) != "" {
		// The answer comes after the client's timeout: what the client
		// gets is that timeout, at once.
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, errClientTimeout
	}
	resp.Request = req
	return resp, nil
}

// lateHeader marks, from the listener to the delivery's transport, an
// answer that comes after the client's timeout (faults.KindEffectSlow);
// the client never sees it.
const lateHeader = "X-Twice-Answer-Late"

// deadlineHeader tells the listener that the client waits for its answer
// with a deadline (faults.Step.Deadline): http.Client.Timeout, which
// net/http sets as the request context's deadline, or a caller's own.
const deadlineHeader = "X-Twice-Client-Deadline"

// errClientTimeout is what a delivery's transport returns for an answer
// that comes after the client's timeout: the error net/http's own
// Client.Timeout makes (http.Client wraps it in a *url.Error naming the
// request, as it does a real one), with the same text, Timeout and
// Temporary true, and matching context.DeadlineExceeded. The harness
// does not wait the timeout out: the error comes at once.
var errClientTimeout error = &clientTimeoutError{}

type clientTimeoutError struct{}

func (*clientTimeoutError) Error() string {
	return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
}
func (*clientTimeoutError) Timeout() bool     { return true }
func (*clientTimeoutError) Temporary() bool   { return true }
func (*clientTimeoutError) Is(err error) bool { return err == context.DeadlineExceeded }

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// HTTPClient returns the delivery's HTTP client: hand it to the SDK or
// the code that makes HTTP calls (stripe-go's BackendConfig.HTTPClient,
// an AWS SDK's HTTPClient option, your own webhook client). Code that
// uses the process's default client instead (http.DefaultClient,
// stripe-go's package-level functions) needs nothing: its calls are
// routed by the calling goroutine (route.go). Whatever host
// a request names, it goes, through a real net/http Transport, to the
// scenario's provider of that host (HTTPProviders), and every attempt,
// an SDK's own retries included, is a step of the delivery and, unless
// it only reads (GET, HEAD, OPTIONS, TRACE), an effect in the scenario's
// log: kind from the host, key from the Idempotency-Key header, payload
// the method, path, query and canonical body.
//
// A dead delivery's requests fail, are not made and not recorded. Every
// call returns a client on the same transport.
func (c *Clients) HTTPClient() *http.Client {
	return &http.Client{Transport: c.HTTPTransport()}
}

// HTTPTransport is HTTPClient's transport, for code that builds its own
// *http.Client.
func (c *Clients) HTTPTransport() http.RoundTripper {
	if c == nil {
		return &deliveryTransport{err: errNoFakes("Delivery.HTTPClient")}
	}
	d, err := c.httpDelivery()
	return &deliveryTransport{d: d, err: err}
}

// HTTPBaseURL returns a base URL that reaches host's provider through the
// delivery's HTTPClient, for an SDK that insists on a URL of its own
// (most take any URL, and the real one works: the transport routes every
// host). Requests to it made with another client are refused.
func (c *Clients) HTTPBaseURL(host string) string {
	if c == nil {
		return "http://invalid.twice" + baseURLPrefix + host
	}
	d, err := c.httpDelivery()
	if err != nil {
		return "http://invalid.twice" + baseURLPrefix + host
	}
	return "http://" + d.sink.addr + baseURLPrefix + host
}

func (c *Clients) httpDelivery() (*httpDelivery, error) {
	s, err := c.log.httpSink()
	if err != nil {
		return nil, err
	}
	c.httpOnce.Do(func() { c.web = s.delivery(c) })
	return c.web, nil
}

// ServeHTTP is the listener's handler: one request, one attempt, one step.
func (s *httpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	d := s.deliveries[r.Header.Get(deliveryHeader)]
	s.mu.Unlock()
	if d == nil {
		http.Error(w, "this request did not come through a harness.Delivery's HTTPClient, so it belongs to no delivery; send it with the client Delivery.HTTPClient returns", http.StatusMisdirectedRequest)
		return
	}
	r.Header.Del(deliveryHeader)
	via := faults.Step{HTTP: true, Deadline: r.Header.Get(deadlineHeader) != ""}
	r.Header.Del(deadlineHeader)
	host, path := r.Host, r.URL.Path
	if rest, ok := strings.CutPrefix(path, baseURLPrefix); ok {
		host, path, _ = strings.Cut(rest, "/")
		path = "/" + path
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		cut(w) // the client went away mid-request: nothing reached the provider
		return
	}
	h := s.hostState(host)
	payload, err := canonicalRequest(r.Method, path, r.URL.RawQuery, r.Header.Get("Content-Type"), body)
	if err != nil {
		err = fmt.Errorf("encoding an HTTP request to %s: %w", host, err)
		s.log.fail(err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	call := httpCall{method: r.Method, path: path, query: r.URL.RawQuery, header: r.Header, body: body, key: r.Header.Get(h.setting.KeyHeader), canonical: string(payload)}
	var ans httpAnswer
	ran := false
	do := func() (string, bool, error) {
		ran = true
		ans = s.answer(h, call)
		return ans.result(), ans.replayed, ans.err()
	}
	e := assert.Effect{Kind: h.setting.Kind, Key: call.key, Payload: payload}
	if safeMethod(r.Method) {
		err = d.c.read(r.Context(), e, via, do)
	} else {
		err = d.c.callStep(r.Context(), e, via, do)
	}
	var fx *CallError
	switch {
	case errors.As(err, &fx) && fx.Late:
		// The provider did the work; its answer comes after the client
		// gave up, which the delivery's transport turns into the client's
		// timeout.
		w.Header().Set(lateHeader, "1")
		w.WriteHeader(http.StatusGatewayTimeout)
	case errors.As(err, &fx) && fx.Applied:
		cut(w) // the provider did the work; its answer never arrives
	case errors.As(err, &fx):
		refuse(w, h)
	case err != nil && !ran && r.Context().Err() != nil:
		cut(w) // the client gave up waiting for its step: that request only, the delivery lives
	case err != nil && !ran:
		d.dead.set(err)
		cut(w)
	default:
		ans.write(w)
	}
}

// safeMethod reports whether a request only reads (RFC 9110's safe
// methods): it is a step, with every fault a step can have, but no
// effect, since it changes nothing at the provider; a redelivery that
// reads again is no duplicate.
func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// read is call for a request that only reads: the same step and replies,
// nothing recorded in the log.
func (c *Clients) read(ctx context.Context, e assert.Effect, via faults.Step, do func() (string, bool, error)) error {
	step := faults.Step{SQL: e.String(), Effect: e.Kind, Key: e.Key, HTTP: true, Deadline: via.Deadline}
	reply, err := c.steps.Begin(ctx, step)
	if err != nil {
		return err
	}
	defer c.steps.End(step)
	switch reply {
	case Refused:
		return &CallError{Kind: e.Kind}
	case ReplyLost, AnsweredLate:
		_, _, _ = do()
		return &CallError{Kind: e.Kind, Applied: true, Late: reply == AnsweredLate}
	}
	_, _, err = do()
	return err
}

// cut closes the connection without an answer, as a lost reply does.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	// Not an HTTP/1 connection: no way to cut it, so say the answer was lost.
	http.Error(w, "the provider's answer was lost (the connection could not be cut)", http.StatusGatewayTimeout)
}

// refuse answers an effect-failed fault: the provider refused the call
// before running it, as a busy provider does.
// How is the host's HTTPHost.Refusal.
func refuse(w http.ResponseWriter, h *httpHostState) {
	w.Header().Set("Retry-After", "1")
	switch {
	case h.setting.Refusal == RefuseRateLimit && h.stripe != nil:
		writeStripeError(w, http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "",
			"Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.")
	case h.setting.Refusal == RefuseRateLimit:
		http.Error(w, "429 too many requests: try again later", http.StatusTooManyRequests)
	default:
		http.Error(w, "503 service unavailable: try again later", http.StatusServiceUnavailable)
	}
}

// httpCall is one request as the provider sees it.
type httpCall struct {
	method, path, query string
	header              http.Header
	body                []byte
	key                 string
	canonical           string // the recorded payload: what the key's params are
}

// httpAnswer is a provider's answer, as saved under an idempotency key.
type httpAnswer struct {
	status   int
	header   http.Header
	body     []byte
	executed bool // the endpoint started executing: the answer is saved under the key
	replayed bool
}

func (a httpAnswer) write(w http.ResponseWriter) {
	for k, vs := range a.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if a.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// result is what the effect keeps of the answer: the status and, for a
// JSON object with one, its ID.
func (a httpAnswer) result() string {
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(a.body, &obj) == nil && obj.ID != "" {
		return fmt.Sprintf("%d %s", a.status, obj.ID)
	}
	return strconv.Itoa(a.status)
}

// err is an answer of 400 or more as an error, with Stripe's message when
// the body holds one.
func (a httpAnswer) err() error {
	if a.status < 400 {
		return nil
	}
	return &HTTPStatusError{Status: a.status, Body: string(a.body)}
}

// HTTPStatusError is how an effect of an HTTP request whose answer was an
// error (status 400 or more) records the answer (assert.Effect.Err).
type HTTPStatusError struct {
	Status int    // the answer's status: 402
	Body   string // the answer's body
}

// Error is the status and, for Stripe's JSON error body, its type, code
// and message ("400 idempotency_error: Keys for ..."); for any other
// body, the body cut short.
func (e *HTTPStatusError) Error() string {
	var se struct {
		Error struct{ Type, Code, Message string } `json:"error"`
	}
	if json.Unmarshal([]byte(e.Body), &se) == nil && se.Error.Type != "" {
		what := se.Error.Type
		if se.Error.Code != "" {
			what += " " + se.Error.Code
		}
		return fmt.Sprintf("%d %s: %s", e.Status, what, se.Error.Message)
	}
	b := e.Body
	if len(b) > 200 {
		b = b[:200] + "…"
	}
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), strings.TrimSpace(b))
}

// answer runs the host's provider on call behind its idempotency layer.
func (s *httpSink) answer(h *httpHostState, call httpCall) httpAnswer {
	dedup := h.stripe != nil || h.setting.Dedup
	if !dedup || call.key == "" {
		return s.execute(h, call)
	}
	if len(call.key) > maxKeyLen {
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "Idempotency-Key",
			fmt.Sprintf("The idempotency key is %d characters long; at most %d are allowed.", len(call.key), maxKeyLen))
	}
	verdict, saved, _ := h.keys.claim(call.key, call.canonical, s.log.now())
	switch verdict {
	case keyInFlight:
		return stripeErrorAnswer(http.StatusConflict, "invalid_request_error", "idempotency_key_in_use", "",
			"There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): "+call.key+". Please try again later.")
	case keyMismatch:
		return stripeErrorAnswer(http.StatusBadRequest, "idempotency_error", "", "",
			fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", call.key))
	case keyReplay:
		saved.replayed = true
		return saved
	}
	ans := s.execute(h, call)
	if ans.executed {
		h.keys.settle(call.key, ans)
	} else {
		h.keys.forget(call.key)
	}
	return ans
}

// execute runs the provider itself.
func (s *httpSink) execute(h *httpHostState, call httpCall) httpAnswer {
	if h.stripe != nil {
		return h.stripe.serve(call, s.log.now())
	}
	if h.setting.Answer == nil {
		return httpAnswer{status: http.StatusOK, executed: true}
	}
	req := httptest.NewRequest(call.method, call.path, bytes.NewReader(call.body))
	req.URL.RawQuery = call.query
	req.Header = call.header.Clone()
	rec := httptest.NewRecorder()
	h.setting.Answer.ServeHTTP(rec, req)
	return httpAnswer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes(), executed: true}
}

// canonicalRequest is the effect payload of a request: its method, path,
// query and body, a form or JSON body decoded so that its fields compare
// (and are found volatile) one by one.
func canonicalRequest(method, path, query, contentType string, body []byte) (json.RawMessage, error) {
	p := struct {
		Method string `json:"method"`
		Path   string `json:"path"`
		Query  any    `json:"query,omitempty"`
		Body   any    `json:"body,omitempty"`
	}{Method: method, Path: path}
	if query != "" {
		if q, err := url.ParseQuery(query); err == nil {
			p.Query = formFields(q)
		} else {
			p.Query = query
		}
	}
	if len(body) > 0 {
		p.Body = canonicalBody(contentType, body)
	}
	return json.Marshal(p)
}

func canonicalBody(contentType string, body []byte) any {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "application/x-www-form-urlencoded":
		if v, err := url.ParseQuery(string(body)); err == nil {
			return formFields(v)
		}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil {
			return v
		}
	}
	if utf8.Valid(body) {
		return string(body)
	}
	return body // encoding/json writes it as base64
}

// formFields is a form as an object: one value as a string, several as a
// list.
func formFields(v url.Values) map[string]any {
	m := make(map[string]any, len(v))
	for k, vs := range v {
		if len(vs) == 1 {
			m[k] = vs[0]
		} else {
			m[k] = vs
		}
	}
	return m
}
