package effects_test

import (
	"fmt"
	"net"
	"net/smtp"
	"time"

	"github.com/runtwice/twice/harness/effects"
)

// A job's own net/smtp code sends to the delivery's SMTP sink; each
// message is an email effect, without the Date a send stamps on it.
// PlainAuth is made for the host of the sink's address, 127.0.0.1.
func ExampleClients_SMTPAddr() {
	now := func() time.Time { return time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC) }
	log, err := effects.NewLog(now, effects.Providers{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = log.Close() }()
	addr := log.Clients("j1a1w1", "job-1", 1, grantEvery{}).SMTPAddr()

	host, _, _ := net.SplitHostPort(addr)
	msg := "Subject: Welcome, Asha\r\nDate: " + time.Now().Format(time.RFC1123Z) + "\r\n\r\nYour account is ready.\r\n"
	err = smtp.SendMail(addr, smtp.PlainAuth("", "shop", "secret", host), "shop@example.com", []string{"asha@example.com"}, []byte(msg))
	if err != nil {
		fmt.Println(err)
	}
	for _, e := range log.Effects() {
		fmt.Printf("%s %s happened=%t\n", e.Delivery, e, e.Happened())
	}
	// Output:
	// j1a1w1 email from=shop@example.com to=["asha@example.com"] subject="Welcome, Asha" body="Your account is ready.\n" happened=true
}
