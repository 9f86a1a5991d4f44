package harness_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	goexec "os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestNoFilesUseEachOthersNamesBothWays keeps harness's files layered:
// when a.go uses an unexported name (a package-level name, a method or a
// field) that b.go declares, b.go uses none of a.go's. It type-checks the
// package's non-test files with go/types, with the dependencies' export
// data from go list.
func TestNoFilesUseEachOthersNamesBothWays(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	uses, err := unexportedUses(".")
	if err != nil {
		t.Fatal(err)
	}
	var both []string
	for a, decls := range uses {
		for b, names := range decls {
			if a < b && uses[b][a] != nil {
				both = append(both, fmt.Sprintf("%s <-> %s: %s uses %s; %s uses %s", a, b, a, names, b, uses[b][a]))
			}
		}
	}
	sort.Strings(both)
	for _, b := range both {
		t.Errorf("files use each other's unexported names both ways: %s", b)
	}
}

// unexportedUses type-checks the non-test Go files of the package in dir
// and returns, by using file and declaring file, the unexported names
// one uses of the other.
func unexportedUses(dir string) (map[string]map[string][]string, error) {
	exports, err := exportData(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: imp}).Check("harness", fset, files, info)
	if err != nil {
		return nil, err
	}
	seen := map[string]map[string]map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || obj.Exported() || !obj.Pos().IsValid() {
			continue
		}
		switch o := obj.(type) {
		case *types.Var:
			if !o.IsField() && o.Parent() != pkg.Scope() {
				continue // a local variable or parameter
			}
		case *types.Func:
			if o.Type().(*types.Signature).Recv() == nil && o.Parent() != pkg.Scope() {
				continue
			}
		default:
			if obj.Parent() != pkg.Scope() {
				continue // a local constant or type
			}
		}
		user := filepath.Base(fset.Position(id.Pos()).Filename)
		decl := filepath.Base(fset.Position(obj.Pos()).Filename)
		if user == decl {
			continue
		}
		if seen[user] == nil {
			seen[user] = map[string]map[string]bool{}
		}
		if seen[user][decl] == nil {
			seen[user][decl] = map[string]bool{}
		}
		seen[user][decl][obj.Name()] = true
	}
	out := map[string]map[string][]string{}
	for user, decls := range seen {
		out[user] = map[string][]string{}
		for decl, names := range decls {
			for n := range names {
				out[user][decl] = append(out[user][decl], n)
			}
			sort.Strings(out[user][decl])
		}
	}
	return out, nil
}

// exportData maps the import path of every dependency of the package in
// dir to its export data file, as go list builds it.
func exportData(dir string) (map[string]string, error) {
	cmd := goexec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, file, ok := strings.Cut(sc.Text(), " ")
		if ok && file != "" {
			exports[path] = file
		}
	}
	return exports, sc.Err()
}
