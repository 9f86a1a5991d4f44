package harness

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	twiceassert "github.com/runtwice/twice/assert"
)

func TestEffectWindows(t *testing.T) {
	sent := func(delivery string) twiceassert.Effect {
		return twiceassert.Effect{Kind: "email", Payload: json.RawMessage(`{}`), Delivery: delivery}
	}
	failedSend := sent("j1a1w1")
	failedSend.Err = "down"
	tests := []struct {
		name                string
		overlapped          bool
		faulted             map[string]bool
		log                 []twiceassert.Effect
		duplicates, missing bool
	}{
		{name: "run twice", log: []twiceassert.Effect{sent("j1a1w1"), sent("j1a2w2")}},
		{name: "overlap", overlapped: true, log: []twiceassert.Effect{sent("j1a1w1")}, duplicates: true},
		{name: "crash after an effect", faulted: map[string]bool{"j1a1w1": true}, log: []twiceassert.Effect{sent("j1a1w1"), sent("j1a2w2")}, duplicates: true, missing: true},
		{name: "crash before any effect", faulted: map[string]bool{"j1a1w1": true}, log: []twiceassert.Effect{sent("j1a2w2")}, missing: true},
		{name: "crash after a failed call", faulted: map[string]bool{"j1a1w1": true}, log: []twiceassert.Effect{failedSend}, missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dups, missing := effectWindows(tt.overlapped, tt.faulted, tt.log)
			assert.Equal(t, tt.duplicates, dups, "duplicates")
			assert.Equal(t, tt.missing, missing, "missing")
		})
	}
}
