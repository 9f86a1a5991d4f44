package sesreceipt_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/sesreceipt"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// sesHost is SES v2's endpoint in us-east-1.
const sesHost = "email.us-east-1.amazonaws.com"

// sesAnswer answers SendEmail as SES does, with a message ID: here a
// digest of the request, the same for the same message on every run.
var sesAnswer = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"MessageId":"0100018c-%x"}`, sha256.Sum256(body))
})

// config: an order to mail, and SES as the provider of its host. A
// receipt is at least once.
var config = harness.Config{
	Setup: []harness.Setup{harness.SQL(sesreceipt.Schema + `INSERT INTO orders VALUES (9812, 'ana@example.com', '84.00 EUR');`)},
	Providers: effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		sesHost: {Kind: "receipt", Answer: sesAnswer},
	}}},
	EffectPolicies: map[string]assert.Policy{"receipt": assert.AtLeastOnce},
}

// sesClient is sesv2.New as production calls it, with static credentials
// and on the delivery's HTTP client, and with the SDK's own retries (3
// attempts) but without their wall-clock backoff.
func sesClient(d *harness.Delivery) *sesv2.Client {
	return sesv2.New(sesv2.Options{
		Region:      "us-east-1",
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider("AKIDTWICEEXAMPLE", "twice-example-secret", "")),
		HTTPClient:  d.HTTPClient(),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		}),
	})
}

func job(d *harness.Delivery) sesreceipt.Job { return sesreceipt.Job{DB: d.DB, SES: sesClient(d)} }

// Checked for its record first, recorded once SES accepted it: the
// default matrix passes, the receipts a dying delivery sends again
// being what at least once allows.
func TestSend(t *testing.T) {
	res := harness.Check(t, harness.Job{Name: "ses-receipt", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return job(d).Send(ctx, 9812)
	}}, config)
	if res.Shard != nil {
		return
	}
	if n := len(res.ReferenceEffects); n != 1 || res.ReferenceEffects[0].Kind != "receipt" {
		t.Errorf("the clean run's effects = %v, want one SendEmail to SES", res.ReferenceEffects)
	}
}

// Mailing before looking at the record mails again on every redelivery,
// a receipt sent twice where no delivery died in between.
func TestSendBeforeCheck(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "mails before it looks at its record: every redelivery mails again"
	cfg.ExpectPattern = result.EffectWithoutRecord
	harness.Check(t, harness.Job{Name: "ses-receipt-before-check", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return job(d).SendBeforeCheck(ctx, 9812)
	}}, cfg)
}
