package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The configuration's Go types are its schema, and this file is the one
// decoder that reads a file against it. A field's yaml tag is its key; a
// struct field whose type has yaml-tagged fields is a section; the field's
// Go type says how its value is parsed (string, bool, time.Duration, a
// positive int or int64, a list of table names), unless its config tag
// names another syntax ("size", "limit": a whole number where 0 means no
// limit, or "decoding_work_mem"). So the allowed keys
// of a section, the key path in an error and the syntax of a value all come
// from the one struct tag, and adding a key is adding a field.
//
// Defaults are set before decoding, as Prometheus does: defaultConfig fills
// a Config and the file overwrites the keys it sets to a non-null value.
// What the Go type cannot say (a range, a name's syntax, a rule between
// keys) each section checks in its validate method, which names a key by a
// pointer to its field; the parser turns that pointer into the key path and
// the line of the key.

// configParser carries the state of one Parse call.
type configParser struct {
	name string
	// lines is the number of lines of the file (see countLines), the
	// last line an error may name.
	lines int
	// fields maps every field of the configuration being decoded, by its
	// address and type, to what the file says about it.
	fields map[fieldKey]*fieldInfo
}

// fieldKey identifies a field of the configuration being decoded. The type
// is part of it because a section and its first field share an address.
type fieldKey struct {
	addr uintptr
	typ  reflect.Type
}

// fieldInfo is one key of the schema and what the file holds for it.
type fieldInfo struct {
	path   string     // e.g. "delta.flush_interval"
	parent *fieldInfo // the enclosing section; nil at the top level
	syntax string     // the field's config tag
	key    *yaml.Node // the key in the file; nil when absent
	set    bool       // present with a value other than null
	text   string     // the value of a scalar, after ${VAR} expansion
	items  []*yaml.Node
}

// line returns the line an error about the field is reported at: its key's,
// or for an absent key that of its nearest enclosing section, or 1.
func (f *fieldInfo) line() int {
	for ; f != nil; f = f.parent {
		if f.key != nil {
			return f.key.Line
		}
	}
	return 1
}

// newConfigParser returns a parser that decodes into c, which holds the
// defaults, naming errors after name.
func newConfigParser(name string, c *Config) *configParser {
	p := &configParser{name: name, fields: make(map[fieldKey]*fieldInfo)}
	p.register(reflect.ValueOf(c).Elem(), nil)
	return p
}

// register records every key of the section v, whose own entry is parent.
func (p *configParser) register(v reflect.Value, parent *fieldInfo) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name := yamlKey(sf)
		if name == "" {
			continue
		}
		f := &fieldInfo{path: name, parent: parent, syntax: sf.Tag.Get("config")}
		if parent != nil {
			f.path = parent.path + "." + name
		}
		fv := v.Field(i)
		p.fields[fieldKey{fv.Addr().Pointer(), fv.Type()}] = f
		if hasYAMLFields(fv.Type()) {
			p.register(fv, f)
		}
	}
}

// yamlKey returns the key a struct field is written as, or "" when the
// field is not a key.
func yamlKey(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" || !sf.IsExported() {
		return ""
	}
	return name
}

// hasYAMLFields reports whether t is a configuration section (a struct whose
// fields are keys) rather than a value such as a duration or a table name.
func hasYAMLFields(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("yaml") != "" {
			return true
		}
	}
	return false
}

// sectionKeys returns the keys of a section type, in the order they are
// declared, which is the order they are documented in.
func sectionKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if name := yamlKey(t.Field(i)); name != "" {
			keys = append(keys, name)
		}
	}
	return keys
}

// field returns the entry of the field ptr points to. ptr must point into
// the configuration the parser decodes; anything else is a bug.
func (p *configParser) field(ptr any) *fieldInfo {
	v := reflect.ValueOf(ptr)
	f := p.fields[fieldKey{v.Pointer(), v.Type().Elem()}]
	if f == nil {
		panic(fmt.Sprintf("config: %T is not a field of the configuration being parsed", ptr))
	}
	return f
}

// path returns the key path of the field ptr points to, for messages that
// name another key.
func (p *configParser) path(ptr any) string {
	return p.field(ptr).path
}

// isSet reports whether the file gives the field ptr points to a value
// other than null.
func (p *configParser) isSet(ptr any) bool {
	return p.field(ptr).set
}

// fieldErrorf formats a one-line error about the field ptr points to.
func (p *configParser) fieldErrorf(ptr any, format string, args ...any) error {
	f := p.field(ptr)
	return p.errorf(f.line(), f.path, format, args...)
}

// errorf formats a one-line error at the given line and key path.
func (p *configParser) errorf(line int, path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	// Values are quoted with %q and cut with cutValue, but messages from
	// yaml.v3 and pgconn are not ours: keep the error on one line whatever
	// they hold.
	msg = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(msg)
	// yaml.v3 places a value left empty at the end of the file, such as
	// the document of a file that is only "---", on the line after the
	// last: name the last line instead.
	line = max(min(line, p.lines), 1)
	return fmt.Errorf("%s:%d: %s", p.name, line, msg)
}

// countLines returns the number of lines of data as an editor shows them:
// its line breaks, which are YAML's ("\r\n", "\r", "\n", and the Unicode
// NEL, LS and PS), and one more when it does not end with one.
func countLines(data []byte) int {
	n := 0
	broken := true // the data so far ends with a line break
	for i := 0; i < len(data); i++ {
		broken = true
		switch {
		case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
			i++
		case data[i] == '\r', data[i] == '\n':
		case data[i] == 0xc2 && i+1 < len(data) && data[i+1] == 0x85:
			i++
		case data[i] == 0xe2 && i+2 < len(data) && data[i+1] == 0x80 && (data[i+2] == 0xa8 || data[i+2] == 0xa9):
			i += 2
		default:
			broken = false
			continue
		}
		n++
	}
	if !broken {
		n++
	}
	return n
}

// parseDocument parses data into a node tree and checks that it holds
// exactly one document whose content is a mapping. required names the keys
// an empty file lacks.
func (p *configParser) parseDocument(data []byte, required string) (*yaml.Node, error) {
	p.lines = countLines(data)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errorf(1, "", "the file is empty (it needs at least %s)", required)
		}
		return nil, p.syntaxError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, p.errorf(extra.Line, "", "only one YAML document is allowed (remove the \"---\" separator and what follows it)")
	case !errors.Is(err, io.EOF):
		return nil, p.syntaxError(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errorf(1, "", "the file is not a YAML mapping (it needs at least %s)", required)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errorf(root.Line, "", "the document must be a mapping of keys (%s), not %s",
			strings.Join(sectionKeys(reflect.TypeFor[Config]()), ", "), describeNode(root))
	}
	return root, nil
}

// yamlLinePattern matches the "line N: " that yaml.v3 puts in its messages.
const yamlLinePattern = `^(?:yaml: )?line (\d+): (.*)$`

// syntaxError rewrites a yaml.v3 parse error as a one-line config error.
func (p *configParser) syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := regexp.MustCompile(yamlLinePattern).FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return p.errorf(line, "", "invalid YAML: %s (check the indentation: use spaces, not tabs, and put a space after each colon)", msg)
}

// decodeSection decodes the mapping n into the section v, whose entry is
// sec (nil for the whole file), key by key in the order of the file, and
// returns the first problem: an unknown key, a key set twice, a value of
// the wrong kind or one that does not parse.
func (p *configParser) decodeSection(v reflect.Value, n *yaml.Node, sec *fieldInfo) error {
	secPath := ""
	if sec != nil {
		secPath = sec.path
	}
	known := sectionKeys(v.Type())
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		idx := fieldIndex(v.Type(), k.Value)
		if idx < 0 {
			return p.unknownKeyError(k, secPath, known)
		}
		fv := v.Field(idx)
		f := p.fields[fieldKey{fv.Addr().Pointer(), fv.Type()}]
		if first, dup := seen[k.Value]; dup {
			return p.errorf(k.Line, f.path, "set twice (first at line %d); keep only one", first.Line)
		}
		seen[k.Value] = k
		f.key = k
		if err := p.decodeValue(fv, f, val); err != nil {
			return err
		}
	}
	return nil
}

// fieldIndex returns the index of the field of t written as key, or -1.
func fieldIndex(t reflect.Type, key string) int {
	for i := range t.NumField() {
		if name := yamlKey(t.Field(i)); name != "" && name == key {
			return i
		}
	}
	return -1
}

// maxAliasDepth bounds how many aliases are followed to reach a value, so
// that a cycle cannot loop.
const maxAliasDepth = 16

// resolveAlias returns the node an alias stands for.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < maxAliasDepth; i++ {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is a null scalar (empty, ~ or null unquoted).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decodeValue decodes the value n of the field fv, whose entry is f. A
// null value leaves the default in place.
func (p *configParser) decodeValue(fv reflect.Value, f *fieldInfo, n *yaml.Node) error {
	n = resolveAlias(n)
	if isNull(n) {
		return nil
	}
	if want := nodeKind(fv.Type()); n.Kind != want {
		return p.errorf(f.line(), f.path, "must be %s, not %s", describeType(fv.Type()), describeNode(n))
	}
	switch {
	case hasYAMLFields(fv.Type()):
		return p.decodeSection(fv, n, f)
	case fv.Kind() == reflect.Slice:
		f.set = true
		f.items = n.Content
		list := reflect.MakeSlice(fv.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			path := f.path + "[" + strconv.Itoa(i) + "]"
			item := resolveAlias(item)
			if item.Kind != yaml.ScalarNode || isNull(item) {
				return p.errorf(item.Line, path, "must be %s, not %s", describeType(fv.Type().Elem()), describeNode(item))
			}
			text, err := expand(item.Value)
			if err != nil {
				return p.errorf(item.Line, path, "%v", err)
			}
			if problem := parseValue(list.Index(i), f.syntax, text); problem != "" {
				return p.errorf(item.Line, path, "%s", problem)
			}
		}
		fv.Set(list)
		return nil
	}
	f.set = true
	text, err := expand(n.Value)
	if err != nil {
		return p.errorf(f.line(), f.path, "%v", err)
	}
	f.text = text
	if problem := parseValue(fv, f.syntax, text); problem != "" {
		return p.errorf(f.line(), f.path, "%s", problem)
	}
	return nil
}

// nodeKind returns the kind of YAML node a value of type t is written as.
func nodeKind(t reflect.Type) yaml.Kind {
	switch {
	case hasYAMLFields(t):
		return yaml.MappingNode
	case t.Kind() == reflect.Slice:
		return yaml.SequenceNode
	}
	return yaml.ScalarNode
}

// describeType says what a value of type t is written as, for errors about
// a value of the wrong kind.
func describeType(t reflect.Type) string {
	switch {
	case hasYAMLFields(t):
		return "a mapping of keys (" + strings.Join(sectionKeys(t), ", ") + ")"
	case t == reflect.TypeFor[[]TableName]():
		return "a list of schema.table names"
	case t.Kind() == reflect.Slice:
		return "a list"
	case t == reflect.TypeFor[TableName]():
		return "a schema.table name"
	}
	return "a single value (a string)"
}

// describeNode names the kind of a YAML value for error messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}

// parseValue parses text into v according to v's type, or to syntax (a
// config tag) when it is set, and returns the problem in the words of an
// error message, or "" when text is valid.
func parseValue(v reflect.Value, syntax, text string) string {
	switch syntax {
	case "size":
		n, ok := parseSize(text)
		if !ok {
			return fmt.Sprintf("%q is not a size (write it like 512MiB, 10GB or a number of bytes; 0 means no limit)", cutValue(text))
		}
		v.SetInt(n)
		return ""
	case "decoding_work_mem":
		return parseDecodingWorkMem(v, text)
	case "limit":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n < 0 || v.OverflowInt(n) {
			return fmt.Sprintf("%q is not a whole number (0 means no limit)", cutValue(text))
		}
		v.SetInt(n)
		return ""
	case "":
	default:
		return fmt.Sprintf("the agent does not know the value syntax %q", syntax)
	}
	switch v.Type() {
	case reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Sprintf("%q is not a duration (write it like 10s, 500ms or 1m)", cutValue(text))
		}
		if d <= 0 {
			return fmt.Sprintf("%q is out of range (it must be greater than 0)", cutValue(text))
		}
		v.SetInt(int64(d))
		return ""
	case reflect.TypeFor[TableName]():
		t, err := ParseTableName(text)
		if err != nil {
			return err.Error()
		}
		v.Set(reflect.ValueOf(t))
		return ""
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Sprintf("%q is not true or false", cutValue(text))
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n <= 0 || v.OverflowInt(n) {
			return fmt.Sprintf("%q is not a positive whole number", cutValue(text))
		}
		v.SetInt(n)
	default:
		return fmt.Sprintf("the agent cannot parse a %s", v.Type())
	}
	return ""
}

// parseSize parses a byte size such as 512MiB, 10GB or 1048576.
func parseSize(text string) (int64, bool) {
	units := []struct {
		suffix string
		factor int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
		{"B", 1},
	}
	num, factor := strings.TrimSpace(text), int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || (factor > 1 && n > (1<<62)/factor) {
		return 0, false
	}
	return n * factor, true
}

// parseDecodingWorkMem parses a size PostgreSQL accepts for
// logical_decoding_work_mem, or ServerDecodingWorkMem (zero).
func parseDecodingWorkMem(v reflect.Value, text string) string {
	if strings.TrimSpace(text) == ServerDecodingWorkMem {
		v.SetInt(0)
		return ""
	}
	n, ok := parseSize(text)
	if !ok {
		return fmt.Sprintf("%q is not a size (write it like 1MiB or 512KiB, or %q to keep the server's setting)", cutValue(text), ServerDecodingWorkMem)
	}
	if n < minLogicalDecodingWorkMem || n > maxLogicalDecodingWorkMem {
		return fmt.Sprintf("%q is out of range (PostgreSQL accepts 64KiB to 2147483647KiB; or write %q to keep the server's setting)", cutValue(text), ServerDecodingWorkMem)
	}
	v.SetInt(n)
	return ""
}

// unknownKeyError reports a key that is not part of the section at
// secPath, whose keys are known.
func (p *configParser) unknownKeyError(k *yaml.Node, secPath string, known []string) error {
	hint := ""
	if guess := closestKey(k.Value, known); guess != "" {
		hint = fmt.Sprintf("did you mean %q? ", guess)
	}
	hint += "valid keys: " + strings.Join(known, ", ")
	return p.errorf(k.Line, secPath, "unknown key %q (%s)", cutValue(k.Value), hint)
}

// closestKey returns the known key within edit distance 2 of key, if any.
func closestKey(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		// The distance is at least the difference in length, which spares
		// comparing a long key letter by letter.
		if abs(len(key)-len(k)) >= bestDist {
			continue
		}
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// expand replaces ${NAME} references in s, as described on Parse.
// Its errors are the problem alone; the caller adds the key.
func expand(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			// "$${" is an escaped, literal "${".
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 || !isEnvName(s[i+2:i+end]) {
			return "", errors.New("a \"${\" is not followed by a variable name and \"}\" (write ${NAME} with letters, digits and underscores, or $${ for a literal ${)")
		}
		name := s[i+2 : i+end]
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set (set it in the agent's environment, e.g. an EnvironmentFile of the systemd unit, or write $${ for a literal ${)", cutValue(name))
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

// isEnvName reports whether s is a valid environment variable name for
// ${NAME}: letters, digits and underscores, not starting with a digit.
func isEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// abs returns the absolute value of n.
func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
