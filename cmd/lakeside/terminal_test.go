package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTerminalWriterEscapesControls writes text holding every kind of
// control character, cut at every byte: newlines, tabs and printable
// characters pass, the rest come escaped, and a character cut between two
// writes is whole.
func TestTerminalWriterEscapesControls(t *testing.T) {
	t.Parallel()
	in := "name\t\x1b[2J\x1b]0;forged\x07 é€\u0085\x7f\xff end\r\n"
	want := "name\t\\x1b[2J\\x1b]0;forged\\x07 é€\\u0085\\x7f\\xff end\\x0d\n"
	for cut := range len(in) + 1 {
		var out bytes.Buffer
		w := &terminalWriter{w: &out}
		w.Write([]byte(in[:cut]))
		w.Write([]byte(in[cut:]))
		w.flush()
		if out.String() != want {
			t.Fatalf("cut at %d: %q, want %q", cut, out.String(), want)
		}
	}
}

// TestStatusEscapesNamesFromPostgreSQL renames a captured table to a name
// holding terminal escape sequences: `lakeside status` prints it with its
// control characters escaped, and --json stays valid JSON with the name
// as PostgreSQL holds it.
func TestStatusEscapesNamesFromPostgreSQL(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.t"})
	e.exec(`CREATE TABLE t (id int PRIMARY KEY)`, `INSERT INTO t VALUES (1)`)
	d := e.start()
	waitState(t, e, d, "streaming")
	const evil = "evil\x1b[2J\x1b]0;forged\x07\u009b31m"
	e.exec(`ALTER TABLE t RENAME TO "` + evil + `"`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := e.status()
		if len(st.Captured) == 1 && strings.Contains(st.Captured[0].PostgresName, "evil") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not show the renamed table; log:\n%s", d.log())
		}
	}
	out, errOut, code := e.lakeside("status", "--config", e.configPath)
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, errOut)
	}
	for _, c := range out {
		if c < 0x20 && c != '\n' && c != '\t' || c >= 0x80 && c <= 0x9f {
			t.Fatalf("status printed control character %U:\n%q", c, out)
		}
	}
	if !strings.Contains(out, `evil\x1b[2J\x1b]0;forged\x07\u009b31m`) {
		t.Fatalf("status does not show the name escaped:\n%s", out)
	}
	out, _, code = e.lakeside("status", "--config", e.configPath, "--json")
	var js struct {
		Captured []struct {
			PostgresName string `json:"postgres_name"`
		} `json:"captured"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || code != 0 || len(js.Captured) != 1 || js.Captured[0].PostgresName != "public."+evil {
		t.Fatalf("status --json: %v, %+v\n%s", err, js, out)
	}
	e.stop(d)
}
