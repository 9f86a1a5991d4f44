package redact_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/redact"
)

func TestValue(t *testing.T) {
	for _, tt := range []struct {
		name, setting, value, want string
	}{
		{name: "postgres URL", setting: "TWICE_DATABASE_URL", value: "postgres://u:s3cret@db:5433/x?sslmode=require", want: "postgres://u@db:5433/x?sslmode=require"},
		{name: "postgres password parameter", setting: "TWICE_DATABASE_URL", value: "postgres://u@h/x?password=s3cret&sslmode=disable", want: "postgres://u@h/x?sslmode=disable"},
		{name: "postgres keyword value", setting: "TWICE_DATABASE_URL", value: "host=h user=u password=s3cret dbname=x", want: "host=h user=u password=xxxxx dbname=x"},
		{name: "postgres keyword value quoted", setting: "TWICE_DATABASE_URL", value: `host=h password='it\'s s3cret'`, want: `host=h password='xxxxx'`},
		{name: "postgres malformed", setting: "TWICE_DATABASE_URL", value: "postgres//u:s3cret@h", want: redact.Unparsed},
		{name: "redis URL", setting: "TWICE_REDIS_URL", value: "redis://user:s3cret@127.0.0.1:1/0", want: "redis://user@127.0.0.1:1/0"},
		{name: "redis password only", setting: "TWICE_REDIS_URL", value: "redis://:s3cret@h:6379", want: "redis://h:6379"},
		{name: "redis malformed", setting: "TWICE_REDIS_URL", value: "redis//nonsense:s3cret", want: redact.Unparsed},
		{name: "redis bad port", setting: "TWICE_REDIS_URL", value: "redis://u:s3cret@h:port/0", want: redact.Unparsed},
		{name: "brokers", setting: "TWICE_KAFKA_BROKERS", value: "k1:9092,k2:9092", want: "k1:9092,k2:9092"},
		{name: "brokers with user info", setting: "TWICE_KAFKA_BROKERS", value: "u:s3cret@k1:9092, sasl://u:s3cret@k2:9092", want: "u@k1:9092,sasl://u@k2:9092"},
		{name: "nats token parameter", setting: "TWICE_NATS_URL", value: "nats://h:4222?token=s3cret", want: "nats://h:4222"},
		{name: "provider key", setting: "TWICE_STRIPE_KEY", value: "sk_test_s3cret", want: redact.Hidden},
		{name: "pgpassword", setting: "PGPASSWORD", value: "s3cret", want: redact.Hidden},
		{name: "unix socket", setting: "TWICE_REDIS_URL", value: "/tmp/redis.sock", want: "/tmp/redis.sock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := redact.Value(tt.setting, tt.value)
			if got != tt.want {
				t.Errorf("Value(%s, %q) = %q, want %q", tt.setting, tt.value, got, tt.want)
			}
			if strings.Contains(got, "s3cret") {
				t.Errorf("Value(%s, %q) = %q shows the secret", tt.setting, tt.value, got)
			}
			sc := redact.FromEnv([]string{tt.setting + "=" + tt.value})
			for _, text := range []string{tt.value, "connecting to " + tt.value + ": refused"} {
				if got := sc.String(text); strings.Contains(got, "s3cret") {
					t.Errorf("scrubbed %q = %q", text, got)
				}
			}
		})
	}
}

func TestIsSetting(t *testing.T) {
	for name, want := range map[string]bool{
		"TWICE_DATABASE_URL": true, "TWICE_REDIS_URL": true, "TWICE_KAFKA_BROKERS": true, "PGPASSWORD": true,
		"TWICE_NATS_URL": true, "TWICE_OPENAI_API_KEY": true, "TWICE_SHARD": false, "TWICE_PARALLEL": false, "HOME": false,
	} {
		if got := redact.IsSetting(name); got != want {
			t.Errorf("IsSetting(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestScrubberWriter(t *testing.T) {
	sc := redact.FromEnv([]string{"TWICE_REDIS_URL=redis://u:SuperRedisPw@h:1/0", "TWICE_SHARD=1/2", "HOME=/root"})
	var b bytes.Buffer
	w := sc.Writer(&b)
	if _, err := w.Write([]byte("dial redis://u:SuperRedisPw@h:1/0 for shard 1/2 in /root\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "dial redis://u:xxxxx@h:1/0 for shard 1/2 in /root\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	if none := redact.FromEnv([]string{"HOME=/root"}); none.Writer(&b) != &b {
		t.Error("a Scrubber without secrets wraps the writer")
	}
}
