package examples_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wantPatterns is, for every example with a known finding (here and the
// queue adapters' examples), the pattern twice names for it, in the
// order the file's checks set Config.ExpectFinding. Each check also sets
// Config.ExpectPattern to it, and fails when its finding does not show
// it, so this table is what twice says about them, not what we hope.
var wantPatterns = map[string][]string{
	"examples/bounces/bounces_test.go":             {"CheckThenAct"},
	"examples/chargetimeout/chargetimeout_test.go": {"EffectWithoutRecord"},
	"examples/checkthenact/checkthenact_test.go":   {"CheckThenAct", "WorkLost"},
	"examples/creditnotice/creditnotice_test.go":   {"EffectWithoutRecord"},
	"examples/drivers/drivers_test.go":             {"IncrementWithoutRecord"},
	"examples/loyalty/loyalty_test.go":             {"IncrementWithoutRecord"},
	"examples/orderstatus/orderstatus_test.go":     {"ResultChanged"},
	"examples/payouts/payouts_test.go":             {"KeyWindowPassed", "KeyPerAttempt"},
	"examples/processedjobs/processedjobs_test.go": {"KeyPerEnqueue"},
	"examples/receipts/receipts_test.go":           {"EffectLost"},
	"examples/sesreceipt/receipt_test.go":          {"EffectWithoutRecord"},
	"examples/stripepayout/charge_test.go":         {"KeyPerAttempt"},
	"examples/stripepayout/global_test.go":         {"KeyWindowPassed"},
	"examples/stripepayout/payout_test.go":         {"KeyWindowPassed", "KeyPerAttempt"},
	"examples/stripepayout/refund_test.go":         {"KeyWindowPassed"},
	"examples/twofaults/twofaults_test.go":         {"IncrementWithoutRecord"},
	"examples/webhooks/webhooks_test.go":           {"EffectLost", "RetryWithoutKey"},
	"examples/welcomemail/welcomemail_test.go":     {"EffectWithoutRecord"},
	"adapters/gue/example/loyalty/check_test.go":   {"InsertWithoutKey"},
	"adapters/kafka/example/orders/orders_test.go": {"AckBeforeWork", "InsertWithoutKey"},
	"adapters/nats/example/ledger/ledger_test.go":  {"AckBeforeWork", "CheckThenAct"},
	"adapters/river/example/points/check_test.go":  {"InsertWithoutKey"},
}

// TestEveryKnownFindingNamesItsPattern: every check of an example that
// expects a finding says which pattern it shows, and the patterns are
// the table's. A new broken example without ExpectPattern fails here.
func TestEveryKnownFindingNamesItsPattern(t *testing.T) {
	got := map[string][]string{}
	for _, root := range []string{".", filepath.Join("..", "adapters")} {
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			// The adapters' own tests are not examples.
			if root != "." && !strings.Contains(filepath.ToSlash(path), "/example/") {
				return nil
			}
			findings, patterns, err := expectations(path)
			if err != nil || findings == 0 {
				return err
			}
			rel := "examples/" + filepath.ToSlash(path) // as the repository names it
			if root != "." {
				rel = strings.TrimPrefix(filepath.ToSlash(path), "../")
			}
			if len(patterns) != findings {
				t.Errorf("%s: %d checks set Config.ExpectFinding and %d set Config.ExpectPattern; each known finding names its pattern", rel, findings, len(patterns))
			}
			got[rel] = patterns
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(wantPatterns, got); diff != "" {
		t.Errorf("the examples' known findings and their patterns (-want +got):\n%s", diff)
	}
}

// expectations counts a test file's settings of ExpectFinding and lists
// the result.Pattern names it sets ExpectPattern to, in source order.
func expectations(path string) (findings int, patterns []string, err error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		return 0, nil, err
	}
	note := func(field string, value ast.Expr) {
		switch field {
		case "ExpectFinding":
			findings++
		case "ExpectPattern":
			if sel, ok := value.(*ast.SelectorExpr); ok {
				patterns = append(patterns, sel.Sel.Name)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && i < len(n.Rhs) {
					note(sel.Sel.Name, n.Rhs[i])
				}
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				note(id.Name, n.Value)
			}
		}
		return true
	})
	return findings, patterns, nil
}
