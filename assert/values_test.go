package assert

import (
	"encoding/json"
	"testing"
	"time"
)

func TestCompareValues(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		a, b any
		want int
	}{
		{"null first", nil, int64(0), -1},
		{"ints by value", int64(9), int64(10), -1},
		{"ints beyond 2^53", int64(9007199254740993), int64(9007199254740992), 1},
		{"int and float", int64(2), 1.5, 1},
		{"json numbers", json.Number("10"), json.Number("9.5"), 1},
		{"natural strings", "ORD-9", "ORD-10", -1},
		{"leading zeros differ", "a01", "a1", 1},
		{"equal strings", "x", "x", 0},
		{"times", t0, t0.Add(time.Nanosecond), -1},
		{"bytes", []byte{1}, []byte{1, 0}, -1},
		{"ranks", rank(2), rank(10), -1},
		{"false first", false, true, -1},
		{"json by key", map[string]any{"a": "x"}, map[string]any{"a": "y"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compareValues(tt.a, tt.b); got != tt.want {
				t.Errorf("compareValues(%#v, %#v) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
			if got := compareValues(tt.b, tt.a); got != -tt.want {
				t.Errorf("compareValues(%#v, %#v) = %d, want %d", tt.b, tt.a, got, -tt.want)
			}
		})
	}
}

func TestValueKeyDistinguishesTypes(t *testing.T) {
	vals := []any{nil, int64(1), 1.0, "1", json.Number("1"), true, []byte("1"), []any{"1"}, map[string]any{"1": nil}, rank(1), "1;", "s1:1"}
	seen := map[string]any{}
	for _, v := range vals {
		k := valueKey(v)
		if prev, ok := seen[k]; ok {
			t.Errorf("valueKey(%#v) = valueKey(%#v) = %q", v, prev, k)
		}
		seen[k] = v
	}
}
