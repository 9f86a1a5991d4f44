// Package http2 names the RoundTripper twice registers on
// http.DefaultTransport (harness/effects, route.go). Its name is the
// point: net/http takes a RoundTripper registered for a scheme whose
// type prints as "*http2.Transport" for one that honours its request's
// context (net/http's knownRoundTripperImpl), so an http.Client.Timeout
// on the default transport keeps setting the request's deadline and
// ending it, as without the registration, rather than taking the legacy
// Request.Cancel path, whose errors read differently. It is not HTTP/2.
package http2

import "net/http"

// Transport hands each request to RoundTripper, which honours the
// request's context.
type Transport struct {
	RoundTripper http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.RoundTripper.RoundTrip(req)
}
