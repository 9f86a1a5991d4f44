package assert

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// rank is a value drawn from a sequence, or a foreign key pointing at one,
// after renumbering: #1 is the smallest value of that column on its side.
// go-cmp prints it as s"#1".
type rank int64

func (r rank) String() string { return "#" + strconv.FormatInt(int64(r), 10) }

// valueKey encodes a snapshot value so that two values are equal exactly
// when their keys are: it feeds multiset counting and renumbering maps.
func valueKey(v any) string { return string(appendKey(nil, v)) }

func appendKey(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, 'n')
	case rank:
		return strconv.AppendInt(append(b, 'r'), int64(v), 10)
	case int64:
		return strconv.AppendInt(append(b, 'i'), v, 10)
	case float64:
		return strconv.AppendFloat(append(b, 'f'), v, 'g', -1, 64)
	case bool:
		if v {
			return append(b, 't')
		}
		return append(b, 'b')
	case string:
		b = strconv.AppendInt(append(b, 's'), int64(len(v)), 10)
		return append(append(b, ':'), v...)
	case json.Number:
		return append(append(b, 'j'), v...)
	case time.Time:
		return v.UTC().AppendFormat(append(b, 'T'), time.RFC3339Nano)
	case []byte:
		return hex.AppendEncode(append(b, 'x'), v)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendKey(b, e)
		}
		return append(b, ']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, k)
			b = append(b, ':')
			b = appendKey(b, v[k])
		}
		return append(b, '}')
	}
	// Snapshots only hold the types above; anything else came from a
	// hand-built Snapshot and is keyed by its Go syntax.
	return fmt.Appendf(b, "?%T:%#v", v, v)
}

// typeOrder orders values of different Go types, NULL first.
func typeOrder(v any) int {
	switch v.(type) {
	case nil:
		return 0
	case bool:
		return 1
	case rank:
		return 2
	case int64, float64, json.Number:
		return 3
	case string:
		return 4
	case time.Time:
		return 5
	case []byte:
		return 6
	case []any:
		return 7
	case map[string]any:
		return 8
	}
	return 9
}

// compareValues is a total order on snapshot values: numbers by value,
// strings naturally (so "ORD-9" < "ORD-10"), times chronologically.
func compareValues(a, b any) int {
	ta, tb := typeOrder(a), typeOrder(b)
	if ta != tb {
		return cmp.Compare(ta, tb)
	}
	switch a := a.(type) {
	case nil:
		return 0
	case bool:
		bb := b.(bool)
		switch {
		case a == bb:
			return 0
		case !a:
			return -1
		}
		return 1
	case rank:
		return cmp.Compare(int64(a), int64(b.(rank)))
	case int64:
		if b, ok := b.(int64); ok { // exact beyond float64's 2^53
			return cmp.Compare(a, b)
		}
	case string:
		return compareNatural(a, b.(string))
	case time.Time:
		return a.Compare(b.(time.Time))
	case []byte:
		return bytes.Compare(a, b.([]byte))
	}
	if ta == 3 {
		if c := cmp.Compare(numberOf(a), numberOf(b)); c != 0 {
			return c
		}
	}
	return strings.Compare(valueKey(a), valueKey(b))
}

func numberOf(v any) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return math.NaN()
		}
		return f
	}
	return math.NaN()
}

// compareNatural compares strings with runs of ASCII digits taken as
// numbers, so text keys drawn from a sequence ("ORD-9", "ORD-10") keep
// their drawing order.
func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			if c := cmp.Compare(da, db); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(int(a[0]), int(b[0]))
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// compareRows orders rows column by column.
func compareRows(a, b []any) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareValues(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}
