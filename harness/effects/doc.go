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
// the call returns an *Error: a timeout after the provider made the
// effect (faults.KindEffectLostReply, faults.KindEffectOutage, which
// also loses the answers to the call's retries with its key), an answer
// after the client's timeout (faults.KindEffectSlow; an HTTP client gets
// net/http's own timeout error, at once), or a refusal before it did
// (faults.KindEffectFailed: HTTPHost.Refusal, SMTPProvider). A dead
// delivery's calls are refused and not recorded.
//
// # The executor's side
//
// The harness's executor drives the fakes through Log and Steps, and
// nothing here imports the harness: it makes a Log per scenario with
// NewLog, gives each delivery its Clients with Log.Clients and a Steps of
// its own, which grants each call when the schedule says and answers a
// Fate (Answered, ReplyLost, Refused, AnsweredLate), and reads Log.Effects when the
// scenario is done.
package effects
