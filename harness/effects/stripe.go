package effects

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runtwice/twice/internal/blame"
)

// StripeEndpoints are the endpoints the Stripe-shaped provider answers,
// with bodies stripe-go decodes; any other path is Stripe's 404. Behind
// them is Stripe's idempotency layer (the first answer saved under the
// Idempotency-Key, failures included, and replayed with
// Idempotent-Replayed: true; the same key with other parameters a 400
// idempotency_error; a key in flight a 409; keys forgotten after the
// window on the harness clock; requests refused before executing, such as
// a missing parameter, not saved). Errors are Stripe's JSON bodies, so
// stripe-go decides retries as it does against Stripe. Test values decline
// as Stripe's do: the source tok_chargeDeclined and the payment method
// pm_card_chargeDeclined (402 card_declined), and a transfer or payout
// to DeclinedDestination.
var StripeEndpoints = []string{
	"POST /v1/customers", "GET /v1/customers/{id}",
	"POST /v1/payment_intents", "GET /v1/payment_intents/{id}", "POST /v1/payment_intents/{id}/confirm",
	"POST /v1/payment_intents/{id}/capture", "POST /v1/payment_intents/{id}/cancel",
	"POST /v1/charges", "GET /v1/charges/{id}",
	"POST /v1/refunds", "GET /v1/refunds/{id}",
	"POST /v1/transfers", "GET /v1/transfers/{id}",
	"POST /v1/payouts", "GET /v1/payouts/{id}",
	"POST /v1/invoices", "GET /v1/invoices/{id}", "POST /v1/invoices/{id}/finalize",
	"POST /v1/invoices/{id}/send", "POST /v1/invoices/{id}/pay",
	"GET /v1/subscriptions/{id}",
}

// stripeState is the Stripe provider's objects in one scenario.
type stripeState struct {
	mu      sync.Mutex
	objects map[string]map[string]any
	made    map[string]int // per ID prefix
}

// newStripeState is a scenario's provider holding a copy of seed
// (HTTPHost.StripeObjects, checked by checkStripeObjects).
func newStripeState(seed map[string]map[string]any) *stripeState {
	s := &stripeState{objects: map[string]map[string]any{}, made: map[string]int{}}
	for id, fields := range seed {
		var obj map[string]any
		raw, _ := json.Marshal(fields) // checked to encode
		_ = json.Unmarshal(raw, &obj)
		if obj == nil {
			obj = map[string]any{}
		}
		prefix, _, _ := strings.Cut(id, "_")
		obj["id"], obj["object"] = id, objectNames[prefix]
		if _, ok := obj["livemode"]; !ok {
			obj["livemode"] = false
		}
		if _, ok := obj["metadata"]; !ok {
			obj["metadata"] = map[string]string{}
		}
		s.objects[id] = obj
	}
	return s
}

// checkStripeObjects says what is wrong with host's StripeObjects.
func checkStripeObjects(host string, objs map[string]map[string]any) error {
	for id, fields := range objs {
		prefix, rest, _ := strings.Cut(id, "_")
		if objectNames[prefix] == "" || rest == "" {
			return blame.Userf("Config.Providers.HTTP.Hosts[%q].StripeObjects[%q]: an ID starts with its object's prefix and an underscore (%s), as Stripe's do", host, id, prefixList())
		}
		if _, err := json.Marshal(fields); err != nil {
			return blame.Userf("Config.Providers.HTTP.Hosts[%q].StripeObjects[%q] does not encode as JSON: %w", host, id, err)
		}
	}
	return nil
}

// objectNames maps an ID prefix to its object's name.
var objectNames = func() map[string]string {
	m := map[string]string{}
	for _, p := range stripePrefixes {
		m[p[0]] = p[1]
	}
	return m
}()

func prefixList() string {
	var ps []string
	for _, p := range stripePrefixes {
		ps = append(ps, p[0]+"_")
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}

// stripePrefixes maps a resource to its ID prefix and object name.
var stripePrefixes = map[string][2]string{
	"customers":       {"cus", "customer"},
	"payment_intents": {"pi", "payment_intent"},
	"charges":         {"ch", "charge"},
	"refunds":         {"re", "refund"},
	"transfers":       {"tr", "transfer"},
	"payouts":         {"po", "payout"},
	"invoices":        {"in", "invoice"},
	"subscriptions":   {"sub", "subscription"},
}

func (s *stripeState) serve(call httpCall, now time.Time) httpAnswer {
	if !strings.HasPrefix(call.header.Get("Authorization"), "Bearer ") {
		return stripeErrorAnswer(http.StatusUnauthorized, "invalid_request_error", "", "",
			"You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth.")
	}
	form, err := url.ParseQuery(string(call.body))
	if err != nil {
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "", "The request body could not be parsed as a form.")
	}
	parts := strings.Split(strings.Trim(call.path, "/"), "/")
	notFound := stripeErrorAnswer(http.StatusNotFound, "invalid_request_error", "", "",
		fmt.Sprintf("Unrecognized request URL (%s: %s).", call.method, call.path))
	if len(parts) < 2 || parts[0] != "v1" {
		return notFound
	}
	resource := parts[1]
	if _, ok := stripePrefixes[resource]; !ok {
		return notFound
	}
	switch {
	case call.method == http.MethodGet && len(parts) == 3:
		return s.retrieve(resource, parts[2])
	case call.method == http.MethodPost && len(parts) == 2 && resource != "subscriptions":
		return s.create(resource, form, now)
	case call.method == http.MethodPost && len(parts) == 4 && resource == "payment_intents":
		switch parts[3] {
		case "confirm":
			return s.confirm(parts[2], form)
		case "capture", "cancel":
			return s.intentMove(parts[2], parts[3])
		}
	case call.method == http.MethodPost && len(parts) == 4 && resource == "invoices":
		switch parts[3] {
		case "finalize", "send", "pay":
			return s.invoiceMove(parts[2], parts[3], now)
		}
	}
	return notFound
}

func (s *stripeState) retrieve(resource, id string) httpAnswer {
	s.mu.Lock()
	obj := s.stored(resource, id)
	s.mu.Unlock()
	if obj == nil {
		return noSuch(resource, id, "id")
	}
	return stripeObjectAnswer(obj)
}

// stored is the object id names when it is one of resource's (its ID
// has the resource's prefix), and nil otherwise. s.mu is held.
func (s *stripeState) stored(resource, id string) map[string]any {
	obj, ok := s.objects[id]
	if !ok || !strings.HasPrefix(id, stripePrefixes[resource][0]+"_") {
		return nil
	}
	return obj
}

// noSuch is Stripe's answer to an id that names no object of resource,
// about the request's parameter param.
func noSuch(resource, id, param string) httpAnswer {
	return stripeErrorAnswer(http.StatusNotFound, "invalid_request_error", "resource_missing", param,
		fmt.Sprintf("No such %s: '%s'", stripePrefixes[resource][1], id))
}

// create makes an object. Parameter errors are answered before the
// endpoint executes, so they are not saved under the key.
func (s *stripeState) create(resource string, form url.Values, now time.Time) httpAnswer {
	obj := map[string]any{"livemode": false, "created": now.Unix()}
	if md := metadata(form); len(md) > 0 {
		obj["metadata"] = md
	} else {
		obj["metadata"] = map[string]string{}
	}
	for _, f := range []string{"description", "customer", "destination", "email", "name", "source", "payment_method", "charge", "payment_intent"} {
		if v := form.Get(f); v != "" {
			obj[f] = v
		}
	}
	needsMoney := resource != "customers" && resource != "refunds" && resource != "invoices"
	if needsMoney {
		amount, bad := stripeAmount(form)
		if bad.status != 0 {
			return bad
		}
		obj["amount"] = amount
		cur := strings.ToLower(form.Get("currency"))
		if cur == "" {
			return missingParam("currency")
		}
		obj["currency"] = cur
	}
	declined := false
	switch resource {
	case "transfers":
		if form.Get("destination") == "" {
			return missingParam("destination")
		}
		declined = form.Get("destination") == DeclinedDestination
	case "payouts":
		declined = form.Get("destination") == DeclinedDestination
		obj["status"], obj["method"] = "pending", "standard"
	case "charges":
		if form.Get("source") == "" && form.Get("customer") == "" {
			return missingParam("source")
		}
		declined = form.Get("source") == "tok_chargeDeclined"
		obj["status"], obj["paid"], obj["captured"] = "succeeded", true, true
	case "payment_intents":
		obj["status"] = "requires_payment_method"
		if obj["payment_method"] != nil {
			obj["status"] = "requires_confirmation"
		}
		obj["capture_method"] = cmp.Or(form.Get("capture_method"), "automatic")
	case "invoices":
		if form.Get("customer") == "" {
			return missingParam("customer")
		}
		due := int64(0)
		if form.Get("amount") != "" {
			amount, bad := stripeAmount(form)
			if bad.status != 0 {
				return bad
			}
			due = amount
		}
		obj["status"], obj["amount_due"], obj["amount_paid"], obj["currency"] = "draft", due, 0, cmp.Or(strings.ToLower(form.Get("currency")), "eur")
	case "refunds":
		if bad := s.refund(obj, form); bad.status != 0 {
			return bad
		}
	}
	if declined {
		ans := stripeErrorAnswer(http.StatusPaymentRequired, "card_error", "card_declined", "", "Your card was declined.")
		ans.executed = true // a decline ran: it is saved and replayed
		return ans
	}
	id := s.add(resource, obj)
	if resource == "payment_intents" {
		s.mu.Lock()
		obj["client_secret"] = id + "_secret_twice"
		s.mu.Unlock()
		if form.Get("confirm") == "true" {
			return s.confirm(id, form)
		}
	}
	return stripeObjectAnswer(obj)
}

// refund fills the refund obj of the charge (or payment intent) form
// names, as Stripe checks it: the charge exists and has succeeded, and
// the amount, the charge's unrefunded rest unless given, is no more than
// that rest. The charge's amount_refunded and refunded follow; the
// refund takes the charge's currency.
func (s *stripeState) refund(obj map[string]any, form url.Values) httpAnswer {
	target, kind := form.Get("charge"), "charge"
	if target == "" {
		target, kind = form.Get("payment_intent"), "payment_intent"
	}
	if target == "" {
		return missingParam("charge")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	paid, ok := s.objects[target]
	if ok && kind == "payment_intent" {
		paid, ok = s.objects[fmt.Sprint(paid["latest_charge"])]
	}
	if !ok || !strings.HasPrefix(fmt.Sprint(paid["id"]), "ch_") {
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "resource_missing", kind, fmt.Sprintf("No such %s: '%s'", kind, target))
	}
	if st, ok := paid["status"]; ok && st != "succeeded" {
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "charge_not_refundable", kind, fmt.Sprintf("Charge %s has status %v and cannot be refunded.", paid["id"], st))
	}
	rest := number(paid["amount"]) - number(paid["amount_refunded"])
	amount := rest
	if form.Get("amount") != "" {
		var bad httpAnswer
		if amount, bad = stripeAmount(form); bad.status != 0 {
			return bad
		}
	}
	if amount > rest || rest <= 0 {
		if rest <= 0 {
			return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "charge_already_refunded", "",
				fmt.Sprintf("Charge %s has already been refunded.", paid["id"]))
		}
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "amount_too_large", "amount",
			fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, rest))
	}
	obj["amount"], obj["currency"], obj["status"], obj["charge"] = amount, paid["currency"], "succeeded", paid["id"]
	paid["amount_refunded"] = number(paid["amount_refunded"]) + amount
	paid["refunded"] = number(paid["amount_refunded"]) == number(paid["amount"])
	return httpAnswer{}
}

// number is a JSON number of an object (int64 as the provider makes it,
// float64 as a seed decodes), 0 when absent.
func number(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}

// intentMove captures or cancels a payment intent, from the statuses
// Stripe allows: capture from requires_capture, cancel from any status
// before the money moved.
func (s *stripeState) intentMove(id, move string) httpAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.stored("payment_intents", id)
	if pi == nil {
		return noSuch("payment_intents", id, "intent")
	}
	st := fmt.Sprint(pi["status"])
	switch {
	case move == "capture" && st == "requires_capture":
		pi["status"], pi["amount_received"] = "succeeded", pi["amount"]
		if ch := s.objects[fmt.Sprint(pi["latest_charge"])]; ch != nil {
			ch["captured"] = true
		}
	case move == "cancel" && st != "succeeded" && st != "canceled":
		pi["status"] = "canceled"
	default:
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state", "",
			fmt.Sprintf("This PaymentIntent could not be %s because it has a status of %s.", map[string]string{"capture": "captured", "cancel": "canceled"}[move], st))
	}
	return stripeObjectAnswer(pi)
}

// invoiceMove finalizes, sends or pays an invoice: finalize a draft
// (open); send an open invoice, finalizing a draft first, as Stripe
// does; pay an open one (paid, with a charge of its amount due).
func (s *stripeState) invoiceMove(id, move string, now time.Time) httpAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.stored("invoices", id)
	if inv == nil {
		return noSuch("invoices", id, "invoice")
	}
	st := fmt.Sprint(inv["status"])
	unexpected := func(why string) httpAnswer {
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "invoice_unexpected_state", "", why)
	}
	switch move {
	case "finalize":
		if st != "draft" {
			return unexpected("This invoice is already finalized, you can't re-finalize a non-draft invoice.")
		}
		inv["status"] = "open"
	case "send":
		switch st {
		case "draft":
			inv["status"] = "open"
		case "open", "paid":
		default:
			return unexpected(fmt.Sprintf("You can't send an invoice with a status of %s.", st))
		}
	case "pay":
		switch st {
		case "open":
		case "paid":
			return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "invoice_already_paid", "", "Invoice is already paid")
		default:
			return unexpected(fmt.Sprintf("You can only pay an invoice that is open; this one is %s.", st))
		}
		s.made["ch"]++
		ch := fmt.Sprintf("ch_%d", s.made["ch"])
		for s.objects[ch] != nil {
			s.made["ch"]++
			ch = fmt.Sprintf("ch_%d", s.made["ch"])
		}
		s.objects[ch] = map[string]any{"id": ch, "object": "charge", "amount": inv["amount_due"], "currency": inv["currency"],
			"status": "succeeded", "paid": true, "captured": true, "invoice": id, "customer": inv["customer"], "livemode": false, "created": now.Unix(), "metadata": map[string]string{}}
		inv["status"], inv["paid"], inv["amount_paid"], inv["charge"] = "paid", true, inv["amount_due"], ch
	}
	return stripeObjectAnswer(inv)
}

func (s *stripeState) confirm(id string, form url.Values) httpAnswer {
	s.mu.Lock()
	pi := s.stored("payment_intents", id)
	s.mu.Unlock()
	if pi == nil {
		return noSuch("payment_intents", id, "intent")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pm := form.Get("payment_method"); pm != "" {
		pi["payment_method"] = pm
	}
	switch {
	case pi["status"] == "succeeded":
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state", "",
			"This PaymentIntent's status is succeeded, but it must be requires_confirmation or requires_payment_method to be confirmed.")
	case pi["payment_method"] == nil:
		return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state", "payment_method",
			"You cannot confirm this PaymentIntent because it's missing a payment method.")
	case pi["payment_method"] == "pm_card_chargeDeclined":
		pi["status"] = "requires_payment_method"
		ans := stripeErrorAnswer(http.StatusPaymentRequired, "card_error", "card_declined", "", "Your card was declined.")
		ans.executed = true
		return ans
	}
	s.made["ch"]++
	ch := fmt.Sprintf("ch_%d", s.made["ch"])
	s.objects[ch] = map[string]any{"id": ch, "object": "charge", "amount": pi["amount"], "currency": pi["currency"],
		"status": "succeeded", "paid": true, "captured": true, "payment_intent": id, "livemode": false, "created": pi["created"], "metadata": map[string]string{}}
	pi["status"], pi["latest_charge"], pi["amount_received"] = "succeeded", ch, pi["amount"]
	return stripeObjectAnswer(pi)
}

func (s *stripeState) add(resource string, obj map[string]any) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := stripePrefixes[resource]
	s.made[p[0]]++
	id := fmt.Sprintf("%s_%d", p[0], s.made[p[0]])
	for s.objects[id] != nil { // a seeded object's
		s.made[p[0]]++
		id = fmt.Sprintf("%s_%d", p[0], s.made[p[0]])
	}
	obj["id"], obj["object"] = id, p[1]
	s.objects[id] = obj
	return id
}

func metadata(form url.Values) map[string]string {
	md := map[string]string{}
	for k, vs := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") && len(vs) > 0 {
			md[strings.TrimSuffix(name, "]")] = vs[0]
		}
	}
	return md
}

func stripeAmount(form url.Values) (int64, httpAnswer) {
	raw := form.Get("amount")
	if raw == "" {
		return 0, missingParam("amount")
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n <= 0 {
		return 0, stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "amount",
			fmt.Sprintf("Invalid positive integer: %s", raw))
	}
	return n, httpAnswer{}
}

func missingParam(p string) httpAnswer {
	return stripeErrorAnswer(http.StatusBadRequest, "invalid_request_error", "parameter_missing", p, "Missing required param: "+p+".")
}

// stripeObjectAnswer is a 200 with obj as its body.
func stripeObjectAnswer(obj map[string]any) httpAnswer {
	body, _ := json.Marshal(obj) // plain maps of strings and numbers
	return httpAnswer{status: http.StatusOK, header: stripeHeader(), body: body, executed: true}
}

// stripeErrorAnswer is Stripe's error body; it was not executed (not saved
// under the key) unless the caller says so.
func stripeErrorAnswer(status int, typ, code, param, msg string) httpAnswer {
	e := map[string]string{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	if param != "" {
		e["param"] = param
	}
	body, _ := json.Marshal(map[string]any{"error": e})
	return httpAnswer{status: status, header: stripeHeader(), body: body}
}

func stripeHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Stripe-Version": {"2025-08-27.basil"}}
}

func writeStripeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	stripeErrorAnswer(status, typ, code, param, msg).write(w)
}
