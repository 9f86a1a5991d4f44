// Package effects holds the providers a job's effects go to while twice
// checks it: the systems outside the database (mail, payments, the user's
// own clients) as fakes that record every call into one log per scenario,
// where the oracle compares them with one clean run's.
//
// A handler reaches them through its harness.Delivery: Delivery.Mail
// returns a *Mailer, Delivery.Payments a *Payments, and Delivery.Effect
// wraps a call to a client of the user's own (Clients.Record). The job's
// code takes them as interfaces of its own, as in production, and the
// test wires the fakes into them, so the job never imports twice.
//
// # Providers
//
//   - Mailer sends every email it is asked to: no deduplication, like most
//     mail APIs.
//   - Payments has Stripe's idempotency-key semantics: the same key with
//     the same parameters gets the stored answer and moves no money, the
//     same key with other parameters is an error, a duplicate of a
//     request still in flight is a conflict, and a key is forgotten after
//     a window on the harness clock (PaymentProvider.KeyWindow, 24h).
//   - Clients.Record makes any call an effect of a kind the user names.
//   - Clients.SMTPAddr is a delivery's SMTP sink (harness.Delivery.SMTPAddr):
//     the job's own SMTP client sends to it, and every message it accepts
//     is an email effect (SMTPMessage), no deduplication.
//
// Providers, set as harness.Config.Providers, sets the providers up; each
// scenario gets them afresh, so no scenario sees another's keys.
//
// # Steps and faults
//
// Every call is a step of its delivery, like a statement: a fault can kill
// the delivery just before the call (nothing happens) or right after the
// provider accepted it. Under an effect fault the delivery lives on and
// the call returns a *CallError: a timeout after the provider made the
// effect (faults.KindEffectLostReply, faults.KindEffectOutage, which
// also loses the answers to the call's retries with its key), an answer
// after the client's timeout (faults.KindEffectSlow; an HTTP client gets
// net/http's own timeout error, at once), or a refusal before it did
// (faults.KindEffectFailed: HTTPHost.Refusal, SMTPProvider). A dead
// delivery's calls are refused and not recorded.
//
// # Policies
//
// Each effect kind has a policy (harness.Config.EffectPolicies, values of
// package assert): exactly-once by default; at-least-once (a receipt: a
// duplicate is tolerated only where deliveries overlapped or a crash fell
// between the effect and its durable record, a missing one never);
// at-most-once; or assert.Repeatable, for an effect harmless to repeat at
// the provider (cancelling a subscription: any number of copies, never
// none). A payload field that differs between two clean runs (a
// timestamp) is volatile and left out, named as a path
// (webhook.meta.request_id); harness.Config.IgnoreEffectFields leaves out
// more.
//
// # HTTP
//
// Job code that calls an HTTP API through an SDK (stripe-go, an AWS SDK)
// or net/http is checked unchanged: hand it harness.Delivery.HTTPClient
// where production hands it its own client. Every request, whatever host
// it names, goes through a real net/http Transport (one per delivery,
// with connection reuse and net/http's own replay of a request on a broken
// kept-alive connection) to a listener on 127.0.0.1 that the scenario
// starts, where a provider per host answers. An SDK that insists on a base
// URL gets one from harness.Delivery.HTTPBaseURL; most do not need it.
// stripe-go sleeps 0.5s and more on the wall clock between its retries:
// turn that off (SetNetworkRetriesSleep(false) on its backend) and the
// retries still run, with the same key, without the sleep.
//
// Every attempt, an SDK's own retries included, is a step of the delivery
// and, unless it only reads (GET, HEAD, OPTIONS: a step with a step's
// faults, but no effect), an effect in the scenario's log: its kind is
// the host (api.stripe.com) or HTTPHost.Kind; its key the
// Idempotency-Key header, or the header HTTPHost.KeyHeader names
// (Webhook-Id); its payload the method, path, query and body, a form or
// JSON body decoded field by field.
//
// The providers, set per host in HTTPProviders.Hosts
// (harness.Config.Providers.HTTP):
//
//   - Stripe-shaped (api.stripe.com unless set otherwise; HTTPHost.Stripe):
//     Customers, PaymentIntents (create with its client_secret, confirm,
//     capture, cancel), Charges, Refunds (checked against the charge's
//     amount and earlier refunds), Transfers, Payouts, Invoices (create,
//     finalize, send, pay) and Subscriptions (read), created and
//     retrieved (StripeEndpoints), holding HTTPHost.StripeObjects when
//     each scenario starts (the charge a job refunds, the invoice it
//     sends), with bodies stripe-go decodes and errors as Stripe's JSON bodies, so
//     stripe-go decides its retries as against Stripe. Stripe's
//     idempotency: the first answer saved under the key, failures
//     included, and replayed with Idempotent-Replayed: true; the same key
//     with other parameters a 400 idempotency_error; a key in flight a
//     409; keys forgotten after KeyWindow (24h) on the harness clock;
//     parameter errors not saved. tok_chargeDeclined,
//     pm_card_chargeDeclined and DeclinedDestination decline (402).
//   - Generic (any other host): 200 and an empty body, or HTTPHost.Answer;
//     no deduplication unless HTTPHost.Dedup, which gives it Stripe's key
//     semantics.
//
// What each fault means for an HTTP attempt:
//
//   - crash-mid-job at the call, crash-after-effect: the delivery dies
//     before the request reaches the provider, or right after the
//     provider answered.
//   - effect-lost-reply in the default matrix, on a call with a key
//     (!outage:N): the provider does the work and saves it under the key,
//     and no answer reaches the call or any retry of it with the same key
//     in that delivery: an outage longer than the client's retries. The
//     retries reach the provider, which answers them from the key (a retry
//     with a new key pays again), and the client's error reaches the job's
//     error path. Without a key it is !lostreply:N. A lost answer that the
//     SDK's own same-key retry recovers is by design no finding, so the
//     matrix loses them all; that is where a key drawn per call
//     (stripe-go's default) pays twice.
//   - effect-lost-reply given explicitly (faults.EffectLostReplyAt,
//     !lostreply:N): that one attempt only, its connection cut after the
//     work. net/http replays a request with an Idempotency-Key on a reused
//     connection by itself, and stripe-go retries with the same key: new
//     attempts the provider answers from the key, not findings.
//   - effect-slow (!slow:N): the provider does the work and its answer
//     comes after the client gave up. The client gets, at once, net/http's
//     own timeout error (Timeout() true, errors.Is(err,
//     context.DeadlineExceeded)), with no wall-clock wait (not
//     stripe-go's 80s). The default matrix has it (faults.EffectSlowAnswers)
//     on each HTTP call with no idempotency key whose client waited with a
//     deadline (http.Client.Timeout, or a request context with one; the
//     delivery's transport tells the provider): code that retries a
//     timeout and not a broken connection, a webhook sender's loop, sends
//     again there. On a keyed call it finds nothing an outage does not for
//     stripe-go or net/http; faults.EffectSlowAt puts it on any call.
//   - effect-failed: the provider refuses before doing anything, as
//     HTTPHost.Refusal says: by default Stripe's 429 rate_limit body with
//     Retry-After on a Stripe host (stripe-go does not retry it) and a
//     plain-text 503 with Retry-After elsewhere; RefuseUnavailable gives a
//     Stripe host a load balancer's 503, which stripe-go retries with the
//     same key, and RefuseRateLimit gives any host a 429.
//   - a dead delivery: its request is not made and not recorded; the
//     client gets the delivery's death as its error, and every later
//     request fails at once.
//
// # SMTP
//
// Code that sends mail over SMTP (net/smtp's SendMail, a mail library) is
// checked unchanged: give it harness.Delivery.SMTPAddr where production
// gives the relay's address. Each delivery gets its own SMTP sink on
// 127.0.0.1 (github.com/emersion/go-smtp), started on the first call and
// stopped when the scenario ends; every message it accepts is an email
// effect of that delivery, with no deduplication, as a relay does none.
//
// The sink offers AUTH PLAIN without TLS and takes any user name and
// password. smtp.PlainAuth sends a password in the clear only to
// localhost or 127.0.0.1, and only to the host it dialled, so make it
// with the host of SMTPAddr (net.SplitHostPort), not a name of your own.
// What is compared (SMTPMessage): the envelope sender and recipients, the
// decoded Subject, and the body with its transfer encoding undone and
// line ends made \n. Date and Message-ID are left out. A multipart body
// is kept as sent: a random boundary needs
// harness.Config.IgnoreEffectFields ("email.body").
//
// The end of each message's DATA is a step of the delivery, so the
// default matrix covers every message:
//
//   - crash before the step: the delivery dies with the message unsent.
//   - crash right after it (!crashafter:N, drawn by Explore): the sink
//     accepted and recorded the message, answered 250, and the worker
//     died.
//   - effect-lost-reply, effect-slow: the sink accepts and records the
//     message, then cuts the connection instead of answering 250:
//     SendMail fails (EOF) though the email went out.
//   - effect-failed: 451 4.3.0, a transient refusal before the message is
//     sent, or, with SMTPProvider.PermanentRefusal, 550 5.7.1; SendMail
//     returns it and the email is recorded as refused.
//   - a dead delivery: 421 4.3.0 for its messages and, once it is known
//     dead, at the greeting of its later sessions; nothing is recorded.
//
// net/smtp's SendMail also returns QUIT's error after the relay accepted
// the message, so a job cannot take its error for "not sent" even
// without a fault: a welcome email is at-least-once, and the outbox in
// examples/welcomemail sends it again only while its row says unsent.
//
// # The executor's side
//
// The harness's executor drives the fakes through Log and Steps, and
// nothing here imports the harness: it makes a Log per scenario with
// NewLog, gives each delivery its Clients with Log.Clients and a Steps of
// its own, which grants each call when the schedule says and gives it a
// Reply (Answered, ReplyLost, Refused, AnsweredLate), and reads
// Log.Effects when the scenario is done.
package effects
