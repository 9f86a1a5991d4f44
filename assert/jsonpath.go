package assert

import (
	"slices"
	"strconv"
	"strings"
)

// A path names one value inside a JSON document (a json or jsonb column,
// an effect payload): object keys and array indexes joined by dots,
// "meta.sent_at", "items.0.id". Volatility is found and ignored per path,
// so one key holding a time does not hide the rest of the document.

// differingPaths returns the paths at which two decoded JSON values
// differ, each as its segments; nil when they are equal. A member only one
// object has differs at its own path; values of another type, or arrays
// of another length, differ as a whole, and the whole value's path is the
// empty one.
func differingPaths(a, b any) [][]string {
	var out [][]string
	var walk func(a, b any, at []string)
	walk = func(a, b any, at []string) {
		switch a := a.(type) {
		case map[string]any:
			if b, ok := b.(map[string]any); ok {
				for k, va := range a {
					vb, ok := b[k]
					if !ok {
						out = append(out, append(slices.Clip(at), k))
						continue
					}
					walk(va, vb, append(slices.Clip(at), k))
				}
				for k := range b {
					if _, ok := a[k]; !ok {
						out = append(out, append(slices.Clip(at), k))
					}
				}
				return
			}
		case []any:
			if b, ok := b.([]any); ok && len(a) == len(b) {
				for i := range a {
					walk(a[i], b[i], append(slices.Clip(at), strconv.Itoa(i)))
				}
				return
			}
		}
		if valueKey(a) != valueKey(b) {
			out = append(out, at)
		}
	}
	walk(a, b, nil)
	return out
}

// withoutPaths returns v with the values at paths left out: an object
// member is removed, an array element becomes null so the indexes of the
// others hold. v itself is not changed; a path that does not exist in v
// is skipped.
func withoutPaths(v any, paths [][]string) any {
	for _, p := range paths {
		if len(p) == 0 {
			return nil
		}
		v = without(v, p)
	}
	return v
}

func without(v any, p []string) any {
	switch v := v.(type) {
	case map[string]any:
		sub, ok := v[p[0]]
		if !ok {
			return v
		}
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = e
		}
		if len(p) == 1 {
			delete(m, p[0])
		} else {
			m[p[0]] = without(sub, p[1:])
		}
		return m
	case []any:
		i, err := strconv.Atoi(p[0])
		if err != nil || i < 0 || i >= len(v) {
			return v
		}
		s := slices.Clone(v)
		if len(p) == 1 {
			s[i] = nil
		} else {
			s[i] = without(v[i], p[1:])
		}
		return s
	}
	return v
}

// pathsUnder returns the paths inside the value named by prefix that the
// entries ("prefix.key.sub") name, as segments.
func pathsUnder(prefix string, entries ...[]string) [][]string {
	var out [][]string
	for _, list := range entries {
		for _, e := range list {
			if rest, ok := strings.CutPrefix(e, prefix+"."); ok && rest != "" {
				out = append(out, strings.Split(rest, "."))
			}
		}
	}
	return out
}

// outermost keeps, of a set of paths, those no other path contains.
func outermost(paths [][]string) [][]string {
	slices.SortFunc(paths, func(a, b []string) int { return slices.Compare(a, b) })
	paths = slices.CompactFunc(paths, slices.Equal)
	var out [][]string
	for _, p := range paths {
		if len(out) > 0 && isPrefix(out[len(out)-1], p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func isPrefix(pre, p []string) bool { return len(pre) <= len(p) && slices.Equal(pre, p[:len(pre)]) }
