package effects_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/harness/effects"
)

// What one email costs through the SMTP sink (a net/smtp session on
// 127.0.0.1: connect, EHLO, AUTH, MAIL, RCPT, DATA, QUIT) against the
// Mailer fake's in-process call.
func BenchmarkSMTPSend(b *testing.B) {
	b.Run("smtp-sink", func(b *testing.B) {
		log, err := effects.NewLog(newClock().Now, effects.Providers{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = log.Close() })
		addr := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).SMTPAddr()
		msg := welcome("1")
		for b.Loop() {
			if err := send(addr, msg); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(log.Effects()))/float64(b.N), "emails/op")
	})
	b.Run("mailer-fake", func(b *testing.B) {
		log, err := effects.NewLog(newClock().Now, effects.Providers{})
		if err != nil {
			b.Fatal(err)
		}
		mail := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Mail()
		e := effects.Email{To: "asha@example.com", Subject: "Welcome, Asha", Body: "Your account is ready."}
		ctx := context.Background()
		for b.Loop() {
			if err := mail.Send(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(log.Effects()))/float64(b.N), "emails/op")
	})
}
