package applier

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCrashLoopRecord walks the crash record through the runs of an agent
// that a transaction kills: a batch held at an abnormal exit becomes the
// suspect part, batches in it hold one transaction each, the transaction
// held at three exits in a row is quarantined, a resync releases its
// table, and a clean stop forgets everything.
func TestCrashLoopRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), CrashRecordName)
	// run starts an agent: it reads what the run before left.
	run := func() *crashLoop {
		t.Helper()
		c := &crashLoop{path: path}
		if _, err := c.load(); err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := run()
	if c.narrow(0) {
		t.Fatal("a first start narrows its batches")
	}
	// A flush applies 100..300 and goes; the next holds 300..500 and the
	// agent is killed.
	c.hold(queueRange{After: 100, Through: 300})
	c.settle(300, 300)
	if data, _ := os.ReadFile(path); len(bytes.TrimSpace(data)) != 0 {
		t.Fatalf("a record is left once nothing is held: %q", data)
	}
	c.hold(queueRange{After: 300, Through: 500})

	c = run()
	if c.rec.Exits != 1 || c.rec.Suspect == nil || *c.rec.Suspect != (queueRange{After: 300, Through: 500}) || c.rec.Quarantined != nil {
		t.Fatalf("after the first exit: %+v", c.rec)
	}
	if !c.narrow(300) || c.narrow(500) {
		t.Fatal("batches in the suspect part do not hold one transaction each")
	}
	// One transaction at a time: 300..350 applies, 350..420 is held at
	// the second exit.
	c.hold(queueRange{After: 300, Through: 350, Single: true})
	c.settle(350, 350)
	c.hold(queueRange{After: 350, Through: 420, Single: true})

	c = run()
	if c.rec.Exits != 2 || *c.rec.Suspect != (queueRange{After: 350, Through: 420, Single: true}) || c.rec.Quarantined != nil {
		t.Fatalf("after the second exit: %+v", c.rec)
	}
	c.hold(queueRange{After: 350, Through: 420, Single: true})

	c = run()
	if q := c.quarantined(420); q == nil || q.Exits != MaxCrashExits {
		t.Fatalf("after the third exit: %+v", c.rec)
	}
	if c.narrow(350) {
		t.Fatal("a quarantined transaction still narrows the batches")
	}
	// Other tables go on past it; the quarantine stays while a table is
	// behind it.
	c.hold(queueRange{After: 350, Through: 900})
	c.settle(900, 350)
	if c.quarantined(420) == nil {
		t.Fatal("the quarantine ended while a table is behind it")
	}
	if len(c.quarantined(420).Released) != 0 || !c.release("public.big") || !slices.Equal(c.quarantined(420).Released, []string{"public.big"}) {
		t.Fatal("a resync does not release the table")
	}
	// The release and the quarantine outlive a crash that holds
	// something else, which becomes a suspect of its own.
	c.hold(queueRange{After: 350, Through: 900})
	c = run()
	if q := c.quarantined(420); q == nil || !slices.Equal(q.Released, []string{"public.big"}) || c.rec.Exits != 1 {
		t.Fatalf("the quarantine was lost at an abnormal exit: %+v", c.rec)
	}
	c.settle(900, 900)
	if c.quarantined(420) != nil {
		t.Fatal("the quarantine outlived every table passing it")
	}

	// A clean stop forgets a quarantine: the next start tries again.
	c.hold(queueRange{After: 900, Through: 950, Single: true})
	c = run()
	c.hold(queueRange{After: 900, Through: 950, Single: true})
	c = run()
	c.hold(queueRange{After: 900, Through: 950, Single: true})
	c = run()
	if c.quarantined(950) == nil {
		t.Fatalf("three exits on one transaction did not quarantine it: %+v", c.rec)
	}
	if err := c.remove(); err != nil {
		t.Fatal(err)
	}
	if c = run(); c.rec.Suspect != nil || c.rec.Quarantined != nil {
		t.Fatalf("a clean stop left %+v", c.rec)
	}

	// Exits while different parts of the queue were held do not add up.
	c.hold(queueRange{After: 1000, Through: 1100, Single: true})
	c = run()
	c.hold(queueRange{After: 1100, Through: 1200, Single: true})
	c = run()
	c.hold(queueRange{After: 1200, Through: 1300, Single: true})
	c = run()
	if c.rec.Exits != 1 || c.rec.Quarantined != nil {
		t.Fatalf("exits at three transactions added up: %+v", c.rec)
	}
}

// TestCrashRecordCutShort starts over from a record a crash cut short.
func TestCrashRecordCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), CrashRecordName)
	if err := os.WriteFile(path, []byte(`{"applying":{"after":1`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &crashLoop{path: path}
	if _, err := c.load(); err == nil {
		t.Fatal("a record cut short reads without an error")
	}
	if c.rec.Suspect != nil || c.narrow(0) {
		t.Fatalf("a record cut short counts: %+v", c.rec)
	}
	c.hold(queueRange{After: 5, Through: 6, Single: true})
	c.settle(6, 6)
	if data, _ := os.ReadFile(path); len(bytes.TrimSpace(data)) != 0 {
		t.Fatalf("the record cut short is not replaced: %q", data)
	}
}
