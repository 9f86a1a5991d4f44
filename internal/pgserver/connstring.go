package pgserver

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/runtwice/twice/internal/redact"
)

// withDatabase returns connString with its database replaced, keeping every
// other setting (TLS, options, unix-socket hosts) as it was. It takes both
// forms libpq and pgx accept: a postgres:// or postgresql:// URL and
// keyword/value pairs.
func withDatabase(connString, database string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", err
		}
		q := u.Query()
		if q.Has("dbname") { // a dbname parameter overrides the path
			q.Set("dbname", database)
			u.RawQuery = q.Encode()
		}
		u.Path = "/" + database
		u.RawPath = ""
		return u.String(), nil
	}
	kv, err := parseKeywordValue(connString)
	if err != nil {
		return "", err
	}
	kv["dbname"] = database
	return formatKeywordValue(kv), nil
}

// parseKeywordValue reads libpq's keyword=value form: values may be quoted
// with single quotes, inside which \' and \\ escape.
func parseKeywordValue(s string) (map[string]string, error) {
	kv := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t\n\r\v\f")
		if s == "" {
			return kv, nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, fmt.Errorf("keyword %q has no value", s)
		}
		key := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\v\f")
		var val strings.Builder
		if strings.HasPrefix(s, "'") {
			s = s[1:]
			closed := false
			for len(s) > 0 {
				c := s[0]
				s = s[1:]
				if c == '\\' && len(s) > 0 {
					val.WriteByte(s[0])
					s = s[1:]
					continue
				}
				if c == '\'' {
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("unterminated quoted value of %q", key)
			}
		} else {
			for len(s) > 0 && !strings.ContainsRune(" \t\n\r\v\f", rune(s[0])) {
				if s[0] == '\\' && len(s) > 1 {
					s = s[1:]
				}
				val.WriteByte(s[0])
				s = s[1:]
			}
		}
		kv[key] = val.String()
	}
}

// formatKeywordValue writes kv in a stable order, quoting every value.
func formatKeywordValue(kv map[string]string) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+quoteValue(kv[k]))
	}
	return strings.Join(parts, " ")
}

func quoteValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// WithoutPassword returns connString for display: in logs, messages and
// reports, which CI uploads as artifacts. The password is left out (from a
// URL's user info, a password query parameter or a password keyword), so
// psql given the result asks for it, or takes it from PGPASSWORD or
// ~/.pgpass. A string that parses as neither form is not shown at all.
func WithoutPassword(connString string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		if shown, ok := redact.URL(connString); ok {
			return shown
		}
		return "(a connection string that does not parse)"
	}
	kv, err := parseKeywordValue(connString)
	if err != nil {
		return "(a connection string that does not parse)"
	}
	if _, ok := kv["password"]; !ok {
		return connString
	}
	delete(kv, "password")
	return formatKeywordValue(kv)
}
