package harness

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/runtwice/twice/faults"
)

// checkInputs refuses configuration and settings that mean nothing before
// anything touches the server: a fault built with an argument that is no
// step (faults.CrashAt(0)), a negative duration or bound, a -twice.keep
// or TWICE_KEEP that is no boolean. Each used to run as something else (a
// crash after the last step, the default) in silence.
func checkInputs(cfg Config) error {
	var bad []string
	for _, f := range cfg.Faults {
		if f == nil {
			continue // begin names it
		}
		if err := faults.Validate(f); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		zero string
	}{
		{"SetupTimeout", cfg.SetupTimeout, "2 minutes"},
		{"DeliveryTimeout", cfg.DeliveryTimeout, "30s"},
		{"VisibilityTimeout", cfg.VisibilityTimeout, "30s"},
		{"PaymentKeyWindow", cfg.PaymentKeyWindow, "24h"},
		{"RedriveAfter", cfg.RedriveAfter, "72h"},
	} {
		if d.v < 0 {
			bad = append(bad, fmt.Sprintf("Config.%s is %s; want a positive duration, or zero for %s", d.name, d.v, d.zero))
		}
	}
	if cfg.MaxInterleavings < 0 {
		bad = append(bad, fmt.Sprintf("Config.MaxInterleavings is %d; want a positive number of orders, or zero for %d", cfg.MaxInterleavings, faults.DefaultMaxInterleavings))
	}
	if len(bad) > 0 {
		return errors.New("[twice] " + strings.Join(bad, "; "))
	}
	_, err := keepSetting()
	return err
}

// keepSetting is -twice.keep or TWICE_KEEP: whether a failed check keeps
// its databases, true unless set to false.
func keepSetting() (bool, error) {
	text := setting("twice.keep", KeepEnv)
	if text == "" {
		return true, nil
	}
	v, err := strconv.ParseBool(text)
	if err != nil {
		return true, fmt.Errorf("[twice] -twice.keep or %s is %q; want true (keep a failed check's databases, the default) or false (drop them)", KeepEnv, text)
	}
	return v, nil
}
