package harness

// SMTPAddr returns the address ("127.0.0.1:41873") of the delivery's SMTP
// sink: point the job's own SMTP client at it where production points it
// at its relay, and every message it sends is an email effect of this
// delivery, recorded in the scenario's effect log (no deduplication, as
// a relay does none). With net/smtp:
//
//	addr := d.SMTPAddr()
//	host, _, _ := net.SplitHostPort(addr) // "127.0.0.1"
//	auth := smtp.PlainAuth("", "user", "secret", host)
//	err := smtp.SendMail(addr, auth, from, to, msg)
//
// The sink offers AUTH PLAIN without TLS and takes any credentials;
// PlainAuth agrees to that only for a host of 127.0.0.1 (or localhost)
// equal to the one dialled, which the address gives. The end of each
// message's DATA is a step of the delivery, so the default fault matrix
// covers every message as it covers every effect: a crash just before or
// right after it, a lost reply (the message was sent; the sink cuts the
// connection instead of answering), a refusal ("451 4.3.0", not sent).
// A dead delivery's messages and sessions are refused and not recorded.
// The sink is started on the first call and stopped when the scenario
// ends. See effects.SMTPMessage for what is compared.
func (d *Delivery) SMTPAddr() string { return d.fakes().SMTPAddr() }
