// Package redact keeps secrets out of what twice prints and writes: its
// output, its errors, test logs and the report files, which CI uploads as
// artifacts.
//
// A connection setting (IsSetting: TWICE_DATABASE_URL, TWICE_REDIS_URL,
// TWICE_KAFKA_BROKERS, PGPASSWORD, and any TWICE_ variable named like a
// URL, DSN, broker list, key, token, secret or password) is shown through
// Value: URLs of any scheme without their password (URL), PostgreSQL
// keyword/value strings with theirs masked, keys not at all, and a value
// that does not parse not at all, since where its password is cannot be
// told. A Scrubber is the second line: made from the environment, it
// masks every secret those settings hold wherever it appears in text,
// whatever printed it.
package redact

import (
	"errors"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask stands for a secret a Scrubber took out of text.
const Mask = "xxxxx"

// Unparsed is what Value shows of a setting that does not parse.
const Unparsed = "(a value that does not parse, not shown: it may hold a password)"

// Hidden is what Value shows of a key, token, secret or password.
const Hidden = "(not shown)"

// Settings are the connection settings twice and its adapters read by
// name.
var Settings = []string{"TWICE_DATABASE_URL", "TWICE_REDIS_URL", "TWICE_KAFKA_BROKERS", "PGPASSWORD"}

// settingSuffixes name a TWICE_ variable as a connection setting or a
// credential, so one an adapter adds later is covered too.
var settingSuffixes = []string{"_URL", "_URLS", "_DSN", "_BROKERS", "_ADDR", "_ADDRS", "_SERVERS", "_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_CREDENTIALS"}

// keySuffixes name a setting whose whole value is a secret.
var keySuffixes = []string{"_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_CREDENTIALS"}

// IsSetting says whether the environment variable name holds a
// connection setting or a credential.
func IsSetting(name string) bool {
	if slices.Contains(Settings, name) {
		return true
	}
	if !strings.HasPrefix(name, "TWICE_") {
		return false
	}
	for _, s := range settingSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

func isKey(name string) bool {
	if name == "PGPASSWORD" {
		return true
	}
	for _, s := range keySuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// secretParams are query parameters that carry credentials.
var secretParams = []string{"password", "pass", "pwd", "sslpassword", "secret", "token", "key", "apikey", "api_key", "access_key", "secret_key", "auth"}

// URL returns the URL s without its password (user info) and without
// query parameters that carry credentials, so a tool given it asks for
// the password or takes it from its own place; ok is false when s does
// not parse as a URL.
func URL(s string) (shown string, ok bool) {
	u, err := url.Parse(s)
	if err != nil {
		return "", false
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
		if u.User.Username() == "" {
			u.User = nil
		}
	}
	q := u.Query()
	removed := false
	for k := range q {
		if slices.Contains(secretParams, strings.ToLower(k)) {
			q.Del(k)
			removed = true
		}
	}
	if removed {
		u.RawQuery = q.Encode()
	}
	return u.String(), true
}

// hostPort is a part shown as it is: a host, host:port, or a socket path.
var hostPort = regexp.MustCompile(`^(/[^\s:@]*|[A-Za-z0-9._\-\[\]]+(:[0-9]+)?)$`)

// Value returns the value of the setting name as it may be shown: a list
// (comma-separated, as broker lists are) part by part.
func Value(name, value string) string {
	if value == "" {
		return ""
	}
	if isKey(name) {
		return Hidden
	}
	parts := strings.Split(value, ",")
	for i, p := range parts {
		parts[i] = valuePart(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func valuePart(p string) string {
	switch {
	case p == "":
		return p
	case strings.Contains(p, "://"):
		if shown, ok := URL(p); ok {
			return shown
		}
		return Unparsed
	case strings.Contains(p, "@"):
		if _, err := hostURL(p); err != nil {
			return Unparsed
		}
		shown, _ := URL("//" + p)
		return strings.TrimPrefix(shown, "//")
	case strings.Contains(p, "="):
		cfg, err := pgconn.ParseConfig(p)
		if err != nil {
			return Unparsed
		}
		return maskAll(p, passwordForms(cfg.Password))
	case hostPort.MatchString(p):
		return p
	}
	return Unparsed
}

// Secrets returns what the value of the setting name holds that must not
// be shown: passwords, credential parameters, a key; the whole value, and
// what follows its colons, when it does not parse.
func Secrets(name, value string) []string {
	if value == "" {
		return nil
	}
	if isKey(name) {
		return []string{value}
	}
	var out []string
	for p := range strings.SplitSeq(value, ",") {
		out = append(out, partSecrets(strings.TrimSpace(p))...)
	}
	return out
}

func partSecrets(p string) []string {
	if p == "" {
		return nil
	}
	var u *url.URL
	var err error
	switch {
	case strings.Contains(p, "://"):
		u, err = url.Parse(p)
	case strings.Contains(p, "@"):
		u, err = hostURL(p)
	case strings.Contains(p, "="):
		cfg, perr := pgconn.ParseConfig(p)
		if perr == nil {
			return passwordForms(cfg.Password)
		}
		err = perr
	case hostPort.MatchString(p):
		return nil
	default:
		err = errUnparsed
	}
	if err != nil {
		return unparsedSecrets(p)
	}
	var out []string
	if pw, ok := u.User.Password(); ok {
		out = append(out, passwordForms(pw)...)
		if _, raw, ok := strings.Cut(u.User.String(), ":"); ok {
			out = append(out, raw)
		}
	}
	for k, vs := range u.Query() {
		if slices.Contains(secretParams, strings.ToLower(k)) {
			for _, v := range vs {
				out = append(out, passwordForms(v)...)
				out = append(out, url.QueryEscape(v))
			}
		}
	}
	return out
}

// hostURL parses user[:password]@host[:port], as a broker list may give
// its brokers.
func hostURL(p string) (*url.URL, error) {
	u, err := url.Parse("//" + p)
	if err == nil && (u.Host == "" || u.Path != "" || u.RawQuery != "") {
		err = errUnparsed
	}
	return u, err
}

var errUnparsed = errors.New("not a URL, a host or keyword/value pairs")

// unparsedSecrets is all of a value that does not parse, and each piece
// that follows a colon up to the next @ or /: where a password would be.
func unparsedSecrets(p string) []string {
	out := []string{p}
	rest := p
	for {
		_, after, ok := strings.Cut(rest, ":")
		if !ok {
			break
		}
		end := strings.IndexAny(after, "@/")
		piece := after
		if end >= 0 {
			piece = after[:end]
		}
		out = append(out, piece)
		rest = after
	}
	return out
}

// passwordForms is a password as it is, and as it is escaped in a URL and
// in a keyword/value string, where it may be printed.
func passwordForms(pw string) []string {
	if pw == "" {
		return nil
	}
	return []string{pw, url.PathEscape(pw), url.QueryEscape(pw), strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)}
}

func maskAll(s string, secrets []string) string {
	return newReplacer(secrets).Replace(s)
}

// minSecret is the shortest secret a Scrubber masks in free text: a
// shorter one would mask every word that holds it. Value still leaves it
// out of a setting shown.
const minSecret = 4

func newReplacer(secrets []string) *strings.Replacer {
	var uniq []string
	for _, s := range secrets {
		if len(s) >= minSecret && !slices.Contains(uniq, s) {
			uniq = append(uniq, s)
		}
	}
	// Longest first: a secret that holds another is masked whole.
	slices.SortFunc(uniq, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, s := range uniq {
		pairs = append(pairs, s, Mask)
	}
	return strings.NewReplacer(pairs...)
}

// A Scrubber masks the secrets of the connection settings it was made
// from wherever they appear in text.
type Scrubber struct {
	r    *strings.Replacer
	none bool
}

// FromEnv is the Scrubber of the connection settings in env, entries
// NAME=VALUE as os.Environ returns them.
func FromEnv(env []string) *Scrubber {
	var secrets []string
	for _, e := range env {
		name, value, ok := strings.Cut(e, "=")
		if ok && IsSetting(name) {
			secrets = append(secrets, Secrets(name, value)...)
		}
	}
	r := newReplacer(secrets)
	return &Scrubber{r: r, none: len(secrets) == 0}
}

// Env is the Scrubber of the connection settings in this process's
// environment, for a message that carries what a library said of them.
func Env() *Scrubber { return FromEnv(os.Environ()) }

// String returns s with every secret masked.
func (s *Scrubber) String(text string) string {
	if s == nil || s.none {
		return text
	}
	return s.r.Replace(text)
}

// Writer returns a writer that masks every secret in what is written to
// it before passing it on to w. A secret split across two writes is not
// seen; twice writes whole lines.
func (s *Scrubber) Writer(w io.Writer) io.Writer {
	if s == nil || s.none {
		return w
	}
	return &scrubWriter{s: s, w: w}
}

type scrubWriter struct {
	mu sync.Mutex
	s  *Scrubber
	w  io.Writer
}

// Unwrap is the writer written to, for a caller that asks whether it is a
// terminal.
func (sw *scrubWriter) Unwrap() io.Writer { return sw.w }

func (sw *scrubWriter) Write(p []byte) (int, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if _, err := io.WriteString(sw.w, sw.s.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// InPlace masks every secret in the strings v points to, through its
// structs' exported fields, slices, arrays, maps and pointers: a report
// made of what tests printed is scrubbed before it is rendered, where an
// HTML or JSON escape would hide a secret from String.
func (s *Scrubber) InPlace(v any) {
	if s == nil || s.none {
		return
	}
	s.walk(reflect.ValueOf(v))
}

func (s *Scrubber) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			s.walk(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				s.walk(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			if v.CanSet() {
				v.SetBytes([]byte(s.String(string(v.Bytes()))))
			}
			return
		}
		for i := range v.Len() {
			s.walk(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			s.walk(e)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(s.String(v.String()))
		}
	}
}
