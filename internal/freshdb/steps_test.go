package freshdb_test

import (
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/internal/freshdb"
)

func TestLineCol(t *testing.T) {
	tests := []struct {
		name      string
		sql       string
		pos       int
		line, col int
	}{
		{"first char", "SELEC 1", 1, 1, 1},
		{"same line", "SELECT * FORM t", 10, 1, 10},
		{"third line", "SELECT 1;\nSELECT 2;\n  SELEC 3;", 23, 3, 3},
		{"after multibyte", "-- café\nSELEC 1", 9, 2, 1},
		{"line start", "a\nb", 3, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, col := freshdb.LineCol(tt.sql, tt.pos)
			if line != tt.line || col != tt.col {
				t.Errorf("LineCol(%q, %d) = %d:%d, want %d:%d", tt.sql, tt.pos, line, col, tt.line, tt.col)
			}
		})
	}
}

func TestFromFSOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/010_refunds.sql":   {Data: []byte("-- 10")},
		"migrations/002_orders.sql":    {Data: []byte("-- 2")},
		"migrations/001_customers.sql": {Data: []byte("-- 1")},
		"migrations/README.md":         {Data: []byte("not sql")},
		"migrations/old/003_x.sql":     {Data: []byte("-- subdirectory")},
		"other/004_y.sql":              {Data: []byte("-- other dir")},
	}
	steps, err := freshdb.FromFS(fsys, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, s.Name+" "+s.SQL)
	}
	want := []string{
		"migrations/001_customers.sql -- 1",
		"migrations/002_orders.sql -- 2",
		"migrations/010_refunds.sql -- 10",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromFS steps mismatch (-want +got):\n%s", diff)
	}

	if _, err := freshdb.FromFS(fsys, "nothing"); err == nil {
		t.Error("FromFS of a missing dir succeeded, want error")
	}
	if _, err := freshdb.FromFS(fstest.MapFS{"m/a.txt": {}}, "m"); err == nil {
		t.Error("FromFS of a dir without *.sql succeeded, want error")
	}
}
