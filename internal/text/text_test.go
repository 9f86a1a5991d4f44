package text_test

import (
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/text"
)

func TestOneLine(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name, in, want string
	}{
		{"folds white space", "SELECT 1\n\t  FROM t\n", "SELECT 1 FROM t"},
		{"empty", " \n ", ""},
		{"exactly the limit stays whole", strings.Repeat("y", 120), strings.Repeat("y", 120)},
		{"longer is cut to 120 with dots", long, strings.Repeat("x", 117) + "..."},
		{"counts characters, not bytes", strings.Repeat("é", 121), strings.Repeat("é", 117) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := text.OneLine(tt.in); got != tt.want {
				t.Errorf("OneLine(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFirstLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"one", "one"},
		{"first\nsecond\nthird", "first"},
		{"\nafter an empty line", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := text.FirstLine(tt.in); got != tt.want {
			t.Errorf("FirstLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPlural(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{{0, "rows"}, {1, "row"}, {2, "rows"}, {-1, "rows"}}
	for _, tt := range tests {
		if got := text.Plural(tt.n, "row"); got != tt.want {
			t.Errorf("Plural(%d, %q) = %q, want %q", tt.n, "row", got, tt.want)
		}
	}
}

func TestName(t *testing.T) {
	type color int
	names := []string{1: "red", 2: "green"}
	tests := []struct {
		v    color
		want string
	}{{1, "red"}, {2, "green"}, {0, "color(0)"}, {3, "color(3)"}, {-1, "color(-1)"}}
	for _, tt := range tests {
		if got := text.Name(names, tt.v, "color"); got != tt.want {
			t.Errorf("Name(%d) = %q, want %q", tt.v, got, tt.want)
		}
	}
}
