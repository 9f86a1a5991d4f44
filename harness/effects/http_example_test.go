package effects_test

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/runtwice/twice/harness/effects"
)

// Any code that takes an *http.Client makes its calls through the
// delivery's: here a form POST to Stripe with a key from the job, sent
// twice. The second is answered from the key.
func ExampleClients_HTTPClient() {
	log, err := effects.NewLog(func() time.Time { return time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC) }, effects.Providers{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = log.Close() }()
	client := log.Clients("j1a1w1", "1", 1, grantEvery{}).HTTPClient() // in a handler: d.HTTPClient()

	for range 2 {
		form := url.Values{"amount": {"48250"}, "currency": {"eur"}, "destination": {"acct_381"}}
		req, _ := newFormRequest("https://api.stripe.com/v1/transfers", form)
		req.Header.Set("Authorization", "Bearer sk_test_x")
		req.Header.Set("Idempotency-Key", "payout-restaurant-381-2026-W42")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.Contains(string(body), `"id":"tr_1"`))
	}
	for _, e := range log.Effects() {
		fmt.Println(e.String(), "happened:", e.Happened())
	}
	// Output:
	// 200  true
	// 200 true true
	// api.stripe.com key=payout-restaurant-381-2026-W42 method=POST path=/v1/transfers body={"amount":"48250","currency":"eur","destination":"acct_381"} happened: true
	// api.stripe.com key=payout-restaurant-381-2026-W42 method=POST path=/v1/transfers body={"amount":"48250","currency":"eur","destination":"acct_381"} happened: false
}
