package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/alineo-labs/alineo"

// rootName is the root package's name in the table.
const rootName = "alineo"

// docPath is the document holding the table, from the module's root.
const docPath = "docs/architecture.md"

// pendingDocGo are the packages whose doc.go is not checked yet: sandboxd's,
// which its runtime move (issue 39, item 3) rewrites; their imports are
// checked like every other package's.
var pendingDocGo = []string{}

// row is one line of the table: a package (or, with "/...", a package and
// every package below it), its rank, and the packages of this module it may
// import.
type row struct {
	pattern string
	rank    int
	allow   []string
	line    int
}

// pkg is what go list says of a package.
type pkg struct {
	ImportPath   string
	Name         string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
}

// rel is p's path in the table: relative to the module, rootName for the
// root package.
func (p pkg) rel() string { return relPath(p.ImportPath) }

func relPath(importPath string) string {
	if importPath == module {
		return rootName
	}
	return strings.TrimPrefix(importPath, module+"/")
}

func ours(importPath string) bool {
	return importPath == module || strings.HasPrefix(importPath, module+"/")
}

// matches reports whether the table pattern pat covers the package rel.
func matches(pat, rel string) bool {
	if base, ok := strings.CutSuffix(pat, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return pat == rel
}

type arch struct {
	root string
	rows []row
	pkgs []pkg
}

func load(t *testing.T) *arch {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	a := &arch{root: filepath.Dir(strings.TrimSpace(string(out)))}
	doc, err := os.Open(filepath.Join(a.root, docPath))
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Close()
	if a.rows, err = parseTable(doc); err != nil {
		t.Fatalf("%s: %v", docPath, err)
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = a.root
	out, err = cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list: decode: %v", err)
		}
		a.pkgs = append(a.pkgs, p)
	}
	return a
}

// parseTable reads the fenced block "```imports" of the document: one row
// per line, "PACKAGE RANK IMPORTS...", where IMPORTS is "-" for none; "#"
// starts a comment.
func parseTable(r io.Reader) ([]row, error) {
	var rows []row
	in, found := false, false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```imports":
			in, found = true, true
			continue
		case !in:
			continue
		case strings.TrimSpace(line) == "```":
			in = false
			continue
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want PACKAGE RANK IMPORTS... (\"-\" for none), got %q", n, line)
		}
		rank, err := strconv.Atoi(f[1])
		if err != nil || rank < 0 {
			return nil, fmt.Errorf("line %d: rank %q is not a number", n, f[1])
		}
		rw := row{pattern: f[0], rank: rank, line: n}
		if !(len(f) == 3 && f[2] == "-") {
			rw.allow = f[2:]
		}
		rows = append(rows, rw)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found || in {
		return nil, errors.New("no closed ```imports block")
	}
	return rows, nil
}

// rowOf returns the row of the package rel: the row naming it, else the
// longest "/..." row covering it.
func (a *arch) rowOf(rel string) (row, bool) {
	var best row
	found := false
	for _, r := range a.rows {
		if r.pattern == rel {
			return r, true
		}
		if matches(r.pattern, rel) && (!found || len(r.pattern) > len(best.pattern)) {
			best, found = r, true
		}
	}
	return best, found
}

func (a *arch) allowed(r row, rel string) bool {
	return slices.ContainsFunc(r.allow, func(pat string) bool { return matches(pat, rel) })
}

// TestTable: every package has a row and every row a package; every import a
// row allows exists and is of a rank no higher than the row's own, so the
// allowed imports all point down or across.
func TestTable(t *testing.T) {
	a := load(t)
	seen := map[string]bool{}
	for _, r := range a.rows {
		if seen[r.pattern] {
			t.Errorf("%s:%d: %s has two rows", docPath, r.line, r.pattern)
		}
		seen[r.pattern] = true
	}
	for _, p := range a.pkgs {
		if _, ok := a.rowOf(p.rel()); !ok {
			t.Errorf("%s has no row in %s", p.rel(), docPath)
		}
	}
	for _, r := range a.rows {
		if !slices.ContainsFunc(a.pkgs, func(p pkg) bool { return matches(r.pattern, p.rel()) }) {
			t.Errorf("%s:%d: row %s names no package", docPath, r.line, r.pattern)
		}
		for _, pat := range r.allow {
			n := 0
			for _, p := range a.pkgs {
				if !matches(pat, p.rel()) || p.rel() == r.pattern {
					continue
				}
				n++
				if pr, ok := a.rowOf(p.rel()); ok && pr.rank > r.rank {
					t.Errorf("%s:%d: %s (rank %d) may import %s, of the higher rank %d", docPath, r.line, r.pattern, r.rank, p.rel(), pr.rank)
				}
			}
			if n == 0 {
				t.Errorf("%s:%d: %s may import %s, which names no other package", docPath, r.line, r.pattern, pat)
			}
		}
	}
}

// TestImports: no package imports a package of this module its row does not
// allow (imports of its test files are not checked: tests may use any
// package that does not import them back).
func TestImports(t *testing.T) {
	a := load(t)
	for _, p := range a.pkgs {
		r, ok := a.rowOf(p.rel())
		if !ok {
			continue // TestTable reports it
		}
		for _, imp := range p.Imports {
			if ours(imp) && !a.allowed(r, relPath(imp)) {
				t.Errorf("%s imports %s, which its row in %s (line %d) does not allow", p.rel(), relPath(imp), docPath, r.line)
			}
		}
	}
}

// docRule is the sentence of a doc.go that states its package's imports.
const docRule = "Of this module it imports "

// TestDocGo: every package but a command has a doc.go, and its doc comment
// states the package's row: "Of this module it imports A, B and C only" (or
// "... imports nothing"), with the row's entries as written.
func TestDocGo(t *testing.T) {
	a := load(t)
	for _, p := range a.pkgs {
		rel := p.rel()
		if p.Name == "main" || slices.ContainsFunc(pendingDocGo, func(pat string) bool { return matches(pat, rel) }) {
			continue
		}
		r, ok := a.rowOf(rel)
		if !ok {
			continue
		}
		path := filepath.Join(p.Dir, "doc.go")
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s has no doc.go", rel)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			t.Errorf("%s: no package comment", path)
			continue
		}
		got, err := statedImports(f.Doc.Text())
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		want := slices.Clone(r.allow)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s says it imports %v of this module; its row in %s (line %d) allows %v", path, got, docPath, r.line, want)
		}
	}
}

// statedImports returns the sorted list of a doc comment's docRule sentence.
func statedImports(doc string) ([]string, error) {
	text := strings.Join(strings.Fields(doc), " ")
	_, rest, ok := strings.Cut(text, docRule)
	if !ok {
		return nil, fmt.Errorf("the package comment has no sentence %q...", docRule+"A, B and C only")
	}
	if strings.HasPrefix(rest, "nothing") {
		return []string{}, nil
	}
	list, _, ok := strings.Cut(rest, " only")
	if !ok {
		return nil, fmt.Errorf("%q does not end its list with \" only\"", docRule+rest)
	}
	var out []string
	for _, part := range strings.Split(list, ", ") {
		for item := range strings.SplitSeq(part, " and ") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// TestUpward counts the import lines (file by file) that run from a package
// up to one of a higher rank: none in code (TestTable and TestImports see to
// that, this says so again), and, for the record, those of test files, which
// may import upward (a store's tests use testenv, the bus's tests the SDK).
func TestUpward(t *testing.T) {
	a := load(t)
	var code, tests []string
	for _, p := range a.pkgs {
		r, ok := a.rowOf(p.rel())
		if !ok {
			continue
		}
		for _, files := range []struct {
			names []string
			into  *[]string
		}{
			{slices.Concat(p.GoFiles, p.CgoFiles), &code},
			{slices.Concat(p.TestGoFiles, p.XTestGoFiles), &tests},
		} {
			for _, name := range files.names {
				path := filepath.Join(p.Dir, name)
				f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
				if err != nil {
					t.Fatal(err)
				}
				for _, is := range f.Imports {
					imp, _ := strconv.Unquote(is.Path.Value)
					if !ours(imp) {
						continue
					}
					if ir, ok := a.rowOf(relPath(imp)); ok && ir.rank > r.rank {
						rel, _ := filepath.Rel(a.root, path)
						*files.into = append(*files.into, fmt.Sprintf("%s (rank %d) -> %s (rank %d)", rel, r.rank, relPath(imp), ir.rank))
					}
				}
			}
		}
	}
	t.Logf("upward imports: %d in code, %d in test files", len(code), len(tests))
	for _, l := range tests {
		t.Logf("  test: %s", l)
	}
	for _, l := range code {
		t.Errorf("upward import in code: %s", l)
	}
}

// TestStatedImports checks the parser of the doc.go sentence.
func TestStatedImports(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want []string
		bad  bool
	}{
		{doc: "Package x.\n\nOf this module it imports events and adapters only; never a driver.", want: []string{"adapters", "events"}},
		{doc: "Of this module it imports\nbus, events, internal/validated and\nadapters/internal/... only.", want: []string{"adapters/internal/...", "bus", "events", "internal/validated"}},
		{doc: "Of this module it imports events only.", want: []string{"events"}},
		{doc: "Of this module it imports nothing: it is a leaf.", want: []string{}},
		{doc: "This package imports events only.", bad: true},
		{doc: "Of this module it imports events, adapters.", bad: true},
	} {
		got, err := statedImports(tt.doc)
		if tt.bad {
			if err == nil {
				t.Errorf("statedImports(%q) = %v, want an error", tt.doc, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("statedImports(%q) = %v, %v; want %v", tt.doc, got, err, tt.want)
		}
	}
}

// TestParseTable checks the table's parser.
func TestParseTable(t *testing.T) {
	doc := "text\n```imports\n# a comment\nevents 0 -\nadapters/... 1 events # trailing\n\n```\nafter\n"
	rows, err := parseTable(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []row{{pattern: "events", rank: 0, line: 4}, {pattern: "adapters/...", rank: 1, allow: []string{"events"}, line: 5}}
	if len(rows) != len(want) {
		t.Fatalf("rows = %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i].pattern != want[i].pattern || rows[i].rank != want[i].rank || !slices.Equal(rows[i].allow, want[i].allow) || rows[i].line != want[i].line {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	for _, bad := range []string{"no block", "```imports\nevents x -\n```", "```imports\nevents 0\n```", "```imports\nevents 0 -\n"} {
		if _, err := parseTable(strings.NewReader(bad)); err == nil {
			t.Errorf("parseTable(%q) succeeded, want an error", bad)
		}
	}
}
