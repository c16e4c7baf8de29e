package lakeside_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocs fails when a code reference in docs/*.md no longer names
// something in the code. It reads every inline code span (text between
// backticks, outside fenced code blocks) and checks those of the
// following forms; every other span (SQL, shell, values, names of things
// outside the code such as Delta actions or metrics) is prose to it.
//
//   - A path: a span without spaces whose first element is a directory of
//     the repository (`store/queue.go`, `agent/internal/live`) or one of
//     agent/internal/ or delta/internal/ (`source/backfill.go`,
//     `parquet/write.go`: the docs may leave those two prefixes out). The
//     file or directory must exist; a pattern
//     (`agent/config/testdata/*.good.yml`) must match a file. A Go file is
//     always named with its directory: a bare `flush.go` fails unless it
//     is at the root (`layering_test.go`), since the docs' convention is
//     that a path finds its file.
//   - A path and a name: `applier/flush.go Applier.ingest`,
//     `store/store.go Open`, or a package directory and a name
//     (`delta/internal/parquet DefaultRowGroupBytes`). The name must be
//     declared in that file (or a file of that directory): a function,
//     type, constant or variable, `Type.method`, `Type.field` or
//     `Interface.method`. A method is named with its type: `Writer.flush`,
//     never `flush`.
//   - A package-qualified name: `store.Writer.SetCheckpoint`,
//     `delta.Create`, `source.Config.Backfill`, where the package is one of
//     the module's and the name is exported; the name (and the member after
//     it) must be declared in a package of that name.
//   - A type and a member: `Applier.flush`, `stream.run`,
//     `BackfillStatus.Restarts`, where the first name is a type declared in
//     the module (and not a package or configuration section); some type of
//     that name must have the member, as a method, a field, an interface
//     method or through an embedded field.
//   - A test: `TestSomething`, `BenchmarkSomething` must be a function of a
//     _test.go file (a pattern such as `TestBench*` is prose).
//   - An error, a kind or a default alone: `ErrRemoteConflict`,
//     `KindTooLarge`, `DefaultChunkSize` must be declared at the top level
//     of some file of the module. Other names alone are prose to the test
//     (Delta's `dataChange`, systemd's `MemoryMax`): name the file to have
//     them checked.
//   - A configuration key: `replica.stall_timeout`, `state_dir` (a top-level
//     key alone), `delta.compaction: false` (a key and a value), or several
//     keys of a section, `source.{dsn, slot}`. A span of the form
//     section.snake_case, whose section is one of the configuration's, must
//     be a key the configuration decoder knows: the known keys are derived
//     from the yaml tags of config.Config (agent/config) and the section
//     types it holds.
//
// A code span may not cross a paragraph (an unmatched backtick fails), so
// that no reference escapes the check.
func TestDocs(t *testing.T) {
	c := newCodeIndex(t)
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	checked := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range codeSpans(string(data)) {
			if s.text == "" {
				t.Errorf("%s:%d: a backtick has no partner in its paragraph", doc, s.line)
				continue
			}
			problem, isRef := c.check(s.text)
			if isRef {
				checked++
			}
			if problem != "" {
				t.Errorf("%s:%d: `%s`: %s", doc, s.line, s.text, problem)
			}
		}
	}
	if checked < 500 {
		t.Fatalf("checked %d references in docs/*.md: the test missed them", checked)
	}
}

// span is an inline code span of a document and the line it starts on; an
// empty text is a backtick without a partner.
type span struct {
	text string
	line int
}

// codeSpans returns the inline code spans of a Markdown text, paragraph by
// paragraph, leaving out fenced code blocks. White space inside a span is
// collapsed to single spaces.
func codeSpans(text string) []span {
	var spans []span
	lines := strings.Split(text, "\n")
	fence := false
	for i := 0; i < len(lines); {
		trimmed := strings.TrimSpace(lines[i])
		if strings.HasPrefix(trimmed, "```") {
			fence = !fence
			i++
			continue
		}
		if fence || trimmed == "" {
			i++
			continue
		}
		// A paragraph: the lines up to a blank line or a fence.
		start := i
		var para []string
		for i < len(lines) {
			tl := strings.TrimSpace(lines[i])
			if tl == "" || strings.HasPrefix(tl, "```") {
				break
			}
			para = append(para, lines[i])
			i++
		}
		joined := strings.Join(para, "\n")
		for pos := 0; ; {
			open := strings.IndexByte(joined[pos:], '`')
			if open < 0 {
				break
			}
			open += pos
			lineOf := start + 1 + strings.Count(joined[:open], "\n")
			end := strings.IndexByte(joined[open+1:], '`')
			if end < 0 {
				spans = append(spans, span{line: lineOf})
				break
			}
			end += open + 1
			spans = append(spans, span{text: strings.Join(strings.Fields(joined[open+1:end]), " "), line: lineOf})
			pos = end + 1
		}
	}
	return spans
}

// codeIndex is what the docs may name: the repository's files and the
// names its Go files declare.
type codeIndex struct {
	// dirs are the repository's directories, slash-separated from the
	// root; files its files.
	dirs, files map[string]bool
	// decls are the names each Go file declares (see declare), by path.
	decls map[string]map[string]bool
	// methods are the method names each Go file declares, by path.
	methods map[string]map[string]bool
	// packages maps a package name to its directories.
	packages map[string][]string
	// members maps a type name to the members of every type of that name;
	// embeds to the types it embeds.
	members, embeds map[string]map[string]bool
	// tests are the Test and Benchmark functions of _test.go files;
	// topLevel every name declared at the top level of a file.
	tests, topLevel map[string]bool
	// keys are the configuration keys; sections the sections.
	keys, sections map[string]bool
	// syntax holds the parsed Go files (tests aside) by directory.
	syntax map[string][]*ast.File
}

// shortRoots are the directories a path in the docs may leave out.
var shortRoots = []string{"agent/internal/", "delta/internal/"}

func newCodeIndex(t *testing.T) *codeIndex {
	c := &codeIndex{
		dirs: map[string]bool{}, files: map[string]bool{}, decls: map[string]map[string]bool{},
		methods: map[string]map[string]bool{}, packages: map[string][]string{},
		members: map[string]map[string]bool{}, embeds: map[string]map[string]bool{}, tests: map[string]bool{},
		topLevel: map[string]bool{}, syntax: map[string][]*ast.File{},
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		p = filepath.ToSlash(p)
		if d.IsDir() {
			if name := d.Name(); p != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			c.dirs[p] = true
			return nil
		}
		c.files[p] = true
		if !strings.HasSuffix(p, ".go") || strings.HasPrefix(p, "testdata/") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		c.declare(p, f)
		if !strings.HasSuffix(p, "_test.go") {
			c.syntax[path.Dir(p)] = append(c.syntax[path.Dir(p)], f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.keys, c.sections = configKeys(t, c.syntax)
	if len(c.keys) < 20 {
		t.Fatalf("found %d configuration keys: the test misreads config.Config", len(c.keys))
	}
	return c
}

// declare records the names file p declares.
func (c *codeIndex) declare(p string, f *ast.File) {
	decls, methods := map[string]bool{}, map[string]bool{}
	c.decls[p], c.methods[p] = decls, methods
	pkg := f.Name.Name
	if strings.HasSuffix(p, "_test.go") {
		pkg = strings.TrimSuffix(pkg, "_test")
	}
	if dir := path.Dir(p); !slices.Contains(c.packages[pkg], dir) {
		c.packages[pkg] = append(c.packages[pkg], dir)
	}
	member := func(typ, name string) {
		decls[typ+"."+name] = true
		if c.members[typ] == nil {
			c.members[typ] = map[string]bool{}
		}
		c.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				decls[d.Name.Name] = true
				c.topLevel[d.Name.Name] = true
				if strings.HasSuffix(p, "_test.go") && (strings.HasPrefix(d.Name.Name, "Test") || strings.HasPrefix(d.Name.Name, "Benchmark")) {
					c.tests[d.Name.Name] = true
				}
				continue
			}
			methods[d.Name.Name] = true
			member(receiverType(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						decls[n.Name] = true
						c.topLevel[n.Name] = true
					}
				case *ast.TypeSpec:
					decls[s.Name.Name] = true
					c.topLevel[s.Name.Name] = true
					if c.members[s.Name.Name] == nil {
						c.members[s.Name.Name] = map[string]bool{}
					}
					c.declareMembers(s.Name.Name, s.Type, member)
				}
			}
		}
	}
}

// declareMembers records the fields and interface methods of type name.
func (c *codeIndex) declareMembers(name string, typ ast.Expr, member func(typ, name string)) {
	var list *ast.FieldList
	switch typ := typ.(type) {
	case *ast.StructType:
		list = typ.Fields
	case *ast.InterfaceType:
		list = typ.Methods
	default:
		return
	}
	for _, f := range list.List {
		if len(f.Names) == 0 { // embedded
			if c.embeds[name] == nil {
				c.embeds[name] = map[string]bool{}
			}
			embedded := receiverType(f.Type)
			c.embeds[name][embedded] = true
			member(name, embedded)
			continue
		}
		for _, n := range f.Names {
			member(name, n.Name)
		}
	}
}

// receiverType returns the name of the type of a receiver or embedded
// field: T of T, *T, T[P], pkg.T.
func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// configDir is the directory of the configuration's package.
const configDir = "agent/config"

// configKeys derives the configuration keys from the yaml tags of
// config.Config, in configDir: a field whose type is a struct of the
// module is a section of keys, any other field a key.
func configKeys(t *testing.T, syntax map[string][]*ast.File) (keys, sections map[string]bool) {
	keys, sections = map[string]bool{}, map[string]bool{}
	// structs finds a struct type by package directory and name; imports
	// maps a directory's import names to directories of the module.
	structs := map[string]*ast.StructType{}
	imports := map[string]map[string]string{}
	for dir, files := range syntax {
		imports[dir] = map[string]string{}
		for _, f := range files {
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				own, ok := strings.CutPrefix(ip, module)
				if !ok {
					continue
				}
				name := path.Base(own)
				if imp.Name != nil {
					name = imp.Name.Name
				}
				imports[dir][name] = own
			}
			for _, d := range f.Decls {
				if gd, ok := d.(*ast.GenDecl); ok {
					for _, spec := range gd.Specs {
						if ts, ok := spec.(*ast.TypeSpec); ok {
							if st, ok := ts.Type.(*ast.StructType); ok {
								structs[dir+"."+ts.Name.Name] = st
							}
						}
					}
				}
			}
		}
	}
	var walk func(dir string, st *ast.StructType, prefix string)
	walk = func(dir string, st *ast.StructType, prefix string) {
		for _, f := range st.Fields.List {
			if f.Tag == nil || len(f.Names) == 0 {
				continue
			}
			tag, _ := strconv.Unquote(f.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			typeDir, typeName := dir, ""
			switch ft := f.Type.(type) {
			case *ast.Ident:
				typeName = ft.Name
			case *ast.SelectorExpr:
				if x, ok := ft.X.(*ast.Ident); ok {
					typeDir, typeName = imports[dir][x.Name], ft.Sel.Name
				}
			}
			if sub, ok := structs[typeDir+"."+typeName]; ok {
				sections[prefix+name] = true
				walk(typeDir, sub, prefix+name+".")
				continue
			}
			keys[prefix+name] = true
		}
	}
	root, ok := structs[configDir+".Config"]
	if !ok {
		t.Fatalf("no struct type Config in %s", configDir)
	}
	walk(configDir, root, "")
	return keys, sections
}

var (
	// A path: elements of letters, digits, _ . - and * (a pattern).
	pathRe = regexp.MustCompile(`^[A-Za-z0-9_.*-]+(/[A-Za-z0-9_.*-]+)*/?$`)
	// A Go name, or Type.member.
	nameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
	// pkg.Exported or pkg.Exported.member.
	qualifiedRe = regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?$`)
	// Type.member.
	memberRe = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)$`)
	// A test function.
	testRe = regexp.MustCompile(`^(Test|Benchmark)[A-Z0-9_][A-Za-z0-9_]*$`)
	// An error, a kind or a default, by the module's naming.
	sentinelRe = regexp.MustCompile(`^(Err|Kind|Default)[A-Z][A-Za-z0-9_]*$`)
	// section.key, section.key: value, section.{key, key}.
	keyRe     = regexp.MustCompile(`^([a-z]+)\.([a-z0-9_]+)(?::\s.*)?$`)
	keyListRe = regexp.MustCompile(`^([a-z]+)\.\{([a-z0-9_,\s]+)\}$`)
)

// check returns what is wrong with the reference a code span makes, and
// whether the span is a reference at all.
func (c *codeIndex) check(s string) (problem string, isRef bool) {
	if testRe.MatchString(s) {
		if !c.tests[s] {
			return fmt.Sprintf("no func %s in any _test.go file", s), true
		}
		return "", true
	}
	if sentinelRe.MatchString(s) {
		if !c.topLevel[s] {
			return fmt.Sprintf("%s is not declared in the module", s), true
		}
		return "", true
	}
	if p, name, ok := strings.Cut(s, " "); ok && !strings.Contains(name, " ") && nameRe.MatchString(name) && c.isPath(p) {
		return c.checkDeclared(p, name), true
	}
	if c.isPath(s) {
		return c.checkPath(s), true
	}
	if m := keyListRe.FindStringSubmatch(s); m != nil && c.sections[m[1]] {
		var unknown []string
		for k := range strings.SplitSeq(m[2], ",") {
			if k = strings.TrimSpace(k); !c.keys[m[1]+"."+k] {
				unknown = append(unknown, m[1]+"."+k)
			}
		}
		if len(unknown) > 0 {
			return fmt.Sprintf("%s: no such configuration key", strings.Join(unknown, ", ")), true
		}
		return "", true
	}
	if m := keyRe.FindStringSubmatch(s); m != nil && c.sections[m[1]] {
		if key := m[1] + "." + m[2]; !c.keys[key] {
			return fmt.Sprintf("%s is not a configuration key (config.Config's yaml tags)", key), true
		}
		return "", true
	}
	if c.keys[s] {
		return "", true // a top-level key
	}
	if m := qualifiedRe.FindStringSubmatch(s); m != nil && len(c.packages[m[1]]) > 0 {
		return c.checkQualified(m[1], m[2], m[3]), true
	}
	if m := memberRe.FindStringSubmatch(s); m != nil && c.members[m[1]] != nil && len(c.packages[m[1]]) == 0 && !c.sections[m[1]] {
		if !c.hasMember(m[1], m[2], map[string]bool{}) {
			return fmt.Sprintf("no type %s in the module has a method or field %s", m[1], m[2]), true
		}
		return "", true
	}
	return "", false
}

// isPath reports whether s reads as a path of the repository: its first
// element is a top-level directory, or one under a short root.
func (c *codeIndex) isPath(s string) bool {
	if !pathRe.MatchString(s) {
		return false
	}
	if strings.HasSuffix(s, ".go") {
		return true // bare file names too, to be refused
	}
	first, _, _ := strings.Cut(s, "/")
	if c.dirs[first] && !strings.Contains(first, ".") {
		return strings.Contains(s, "/") || first == s
	}
	for _, r := range shortRoots {
		if c.dirs[r+first] && strings.Contains(s, "/") {
			return true
		}
	}
	return false
}

// resolve returns the repository paths s may name, from the root or a
// short root.
func (c *codeIndex) resolve(s string) []string {
	s = strings.TrimSuffix(s, "/")
	var out []string
	for _, prefix := range append([]string{""}, shortRoots...) {
		p := prefix + s
		if strings.Contains(p, "*") {
			for f := range c.files {
				if ok, _ := path.Match(p, f); ok {
					out = append(out, f)
				}
			}
			continue
		}
		if c.files[p] || c.dirs[p] {
			out = append(out, p)
		}
	}
	return out
}

// checkPath checks that a path names a file or directory.
func (c *codeIndex) checkPath(s string) string {
	if strings.HasSuffix(s, ".go") && !strings.Contains(s, "/") && !c.files[s] {
		if strings.Contains(s, "*") {
			return "" // a pattern of file names, such as tuning_*.go
		}
		return "no such file at the repository root: name a Go file with its directory (from the root, or from agent/internal/ or delta/internal/)"
	}
	if len(c.resolve(s)) == 0 {
		return "no such file or directory (paths are from the repository root, or from agent/internal/ or delta/internal/)"
	}
	return ""
}

// checkDeclared checks that name is declared in the file, or package
// directory, p.
func (c *codeIndex) checkDeclared(p, name string) string {
	if problem := c.checkPath(p); problem != "" {
		return p + ": " + problem
	}
	paths := c.resolve(p)
	var files []string
	for _, r := range paths {
		if c.dirs[r] {
			for f := range c.decls {
				if path.Dir(f) == r {
					files = append(files, f)
				}
			}
		} else {
			files = append(files, r)
		}
	}
	for _, f := range files {
		if c.decls[f][name] {
			return ""
		}
	}
	for _, f := range files {
		if c.methods[f][name] {
			return fmt.Sprintf("%s is a method in %s: name it Type.%s", name, f, name)
		}
	}
	for f := range c.decls {
		if c.decls[f][name] && path.Dir(f) == path.Dir(files[0]) {
			return fmt.Sprintf("%s is declared in %s, not in %s", name, f, strings.Join(files, ", "))
		}
	}
	return fmt.Sprintf("%s is not declared in %s", name, strings.Join(files, ", "))
}

// checkQualified checks pkg.Name and pkg.Name.member.
func (c *codeIndex) checkQualified(pkg, name, member string) string {
	for _, dir := range c.packages[pkg] {
		for f, decls := range c.decls {
			if path.Dir(f) != dir || !decls[name] {
				continue
			}
			if member == "" || c.hasMember(name, member, map[string]bool{}) {
				return ""
			}
		}
	}
	if member != "" {
		return fmt.Sprintf("no %s.%s with a method or field %s in %s", pkg, name, member, strings.Join(c.packages[pkg], ", "))
	}
	return fmt.Sprintf("%s is not declared in package %s (%s)", name, pkg, strings.Join(c.packages[pkg], ", "))
}

// hasMember reports whether some type named typ has member, itself or
// through a type it embeds.
func (c *codeIndex) hasMember(typ, member string, seen map[string]bool) bool {
	if seen[typ] {
		return false
	}
	seen[typ] = true
	if c.members[typ][member] {
		return true
	}
	for e := range c.embeds[typ] {
		if c.hasMember(e, member, seen) {
			return true
		}
	}
	return false
}
