// Package webhooks tells a merchant that an order shipped, with net/http,
// as production does: POST the event to the merchant's endpoint, then
// record that it was sent. Its code never imports twice: the test hands
// it the delivery's *http.Client, where production hands it its own.
//
// Webhooks are delivered at least once, and receivers deduplicate by the
// event's ID (here the Webhook-Id header): Notify builds the ID from the
// job ("order-9812-shipped"), so a retry after a lost answer or a crash is
// the same event, and it records the notification only once the merchant
// answered 2xx. NotifyIgnoringStatus is the common bug: it checks the
// transport's error but not the status, so a 503 from a busy receiver
// counts as delivered and the webhook is never sent again.
//
// Alerter is the other way to be wrong: a customer alert posted to a
// partner that keeps no event IDs, where a repeat shows the customer the
// alert twice, so it is sent at most once: claimed in the database
// first, then posted once with a timeout. AlertRetryingTimeouts is the
// common bug: it retries a POST that timed out, as a retry loop on
// net.Error's Timeout does, though a timed-out POST may have arrived.
package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the record of webhooks sent.
const Schema = `
CREATE TABLE webhooks_sent (
  order_id bigint NOT NULL,
  event    text   NOT NULL,
  PRIMARY KEY (order_id, event)
);
CREATE TABLE alerts_sent (
  order_id bigint PRIMARY KEY
);
`

// Endpoint is the merchant's webhook URL.
const Endpoint = "https://hooks.merchant.example/orders"

// Shipped is the event sent.
type Shipped struct {
	OrderID int64  `json:"order_id"`
	Carrier string `json:"carrier"`
}

// Notifier sends webhooks.
type Notifier struct {
	DB     *pgxpool.Pool
	Client *http.Client
}

// Notify sends the shipped event unless it is recorded as sent, with an
// event ID from the job, and records it once the merchant accepted it.
func (n Notifier) Notify(ctx context.Context, ev Shipped) error {
	return n.notify(ctx, ev, true)
}

// NotifyIgnoringStatus is Notify trusting any answer as delivery.
func (n Notifier) NotifyIgnoringStatus(ctx context.Context, ev Shipped) error {
	return n.notify(ctx, ev, false)
}

func (n Notifier) notify(ctx context.Context, ev Shipped, checkStatus bool) error {
	var sent bool
	if err := n.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhooks_sent WHERE order_id = $1 AND event = 'shipped')`, ev.OrderID).Scan(&sent); err != nil || sent {
		return err
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, Endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Id", fmt.Sprintf("order-%d-shipped", ev.OrderID))
	resp, err := n.Client.Do(req)
	if err != nil {
		return fmt.Errorf("sending the shipped webhook of order %d: %w", ev.OrderID, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if checkStatus && resp.StatusCode/100 != 2 {
		return fmt.Errorf("sending the shipped webhook of order %d: the merchant answered %s", ev.OrderID, resp.Status)
	}
	_, err = n.DB.Exec(ctx, `INSERT INTO webhooks_sent (order_id, event) VALUES ($1, 'shipped') ON CONFLICT DO NOTHING`, ev.OrderID)
	return err
}

// AlertEndpoint is the partner's alert URL. It takes no event ID.
const AlertEndpoint = "https://alerts.partner.example/v1/alerts"

// Alerter posts customer alerts at most once. Its Client has a timeout
// (production's is 10 s).
type Alerter struct {
	DB     *pgxpool.Pool
	Client *http.Client
}

// Alert claims the order's alert, then posts it once: a failed or
// timed-out post is given up, never sent again.
func (a Alerter) Alert(ctx context.Context, ev Shipped) error {
	return a.alert(ctx, ev, 1)
}

// AlertRetryingTimeouts is Alert posting again, up to three times, when
// the partner did not answer in time.
func (a Alerter) AlertRetryingTimeouts(ctx context.Context, ev Shipped) error {
	return a.alert(ctx, ev, 3)
}

func (a Alerter) alert(ctx context.Context, ev Shipped, tries int) error {
	tag, err := a.DB.Exec(ctx, `INSERT INTO alerts_sent (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.OrderID)
	if err != nil || tag.RowsAffected() == 0 {
		return err // claimed before: sent, or given up on
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, AlertEndpoint, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.Client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
		var ne net.Error
		if try < tries && errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		return nil // at most once: the claim stays, the alert is given up
	}
}
