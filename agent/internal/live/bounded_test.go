package live

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// hugeValue is the size of the values the tests below update a row to,
// and testMaxValue the bound they render values with.
const (
	hugeValue    = 10 << 20
	testMaxValue = 64 << 10
)

// boundedRendering is the most bytes a truncated value may render to in
// these tests: the bound's base64 and the marker.
const boundedRendering = testMaxValue*4/3 + 100

// queueHub is a hub over a queue the test writes, without PostgreSQL.
type queueHub struct {
	t   *testing.T
	db  *store.DB
	hub *Hub
	rel *store.Relation
	lsn store.LSN
}

// newQueueHub returns a hub over an empty queue of one table, public.docs:
// id int4 (the key), body text, data bytea. setup, when set, adjusts the
// hub before its first poll.
func newQueueHub(t *testing.T, setup func(h *Hub)) *queueHub {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rel := &store.Relation{Key: store.RelationKey{OID: 16384, LSN: 0x100}, Schema: "public", Name: "docs", ReplicaIdentity: 'd',
		Columns: []store.Column{
			{Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1, Key: true},
			{Name: "body", TypeOID: pgtype.TextOID, TypeMod: -1},
			{Name: "data", TypeOID: pgtype.ByteaOID, TypeMod: -1},
		}}
	err = db.Update(func(w *store.Writer) error {
		if err := w.SetSlotState(&store.SlotState{SystemID: "1", Slot: "live", ConsistentPoint: 0x100}); err != nil {
			return err
		}
		return w.PutRelation(rel)
	})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHub(db, HubConfig{MaxValueBytes: testMaxValue, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if setup != nil {
		setup(h)
	}
	q := &queueHub{t: t, db: db, hub: h, rel: rel, lsn: 0x1000}
	q.poll()
	return q
}

// commit queues one transaction of changes to public.docs.
func (q *queueHub) commit(changes ...store.Change) {
	q.t.Helper()
	q.lsn += 0x100
	for i := range changes {
		changes[i].Relation = q.rel.Key
	}
	txn := &store.Txn{TxnHeader: store.TxnHeader{Xid: uint32(q.lsn), CommitLSN: q.lsn - 1, EndLSN: q.lsn, CommitTime: time.Unix(1700000000, 0)},
		Changes: changes}
	if err := q.db.Update(func(w *store.Writer) error { return w.AppendTxn(txn, 0) }); err != nil {
		q.t.Fatal(err)
	}
}

func (q *queueHub) poll() {
	q.t.Helper()
	if err := q.hub.poll(q.t.Context()); err != nil {
		q.t.Fatal(err)
	}
}

// docRow returns the values of a row of public.docs.
func docRow(id int64, body, data []byte) []store.Value {
	return []store.Value{{Kind: store.KindInt32, Int: id}, {Kind: store.KindString, Bytes: body}, {Kind: store.KindBytes, Bytes: data}}
}

// hugeDoc returns a body and data of hugeValue bytes each.
func hugeDoc() (body, data []byte) {
	return bytes.Repeat([]byte("Grüße "), hugeValue/8), bytes.Repeat([]byte{0, 1, 2, 0xff}, hugeValue/4)
}

// checkTruncated fails the test unless raw is a truncated value's object
// of a value of size bytes, rendered within the bound.
func checkTruncated(t *testing.T, what string, raw json.RawMessage, size int) {
	t.Helper()
	var tr struct {
		Truncated bool   `json:"truncated"`
		Bytes     int    `json:"bytes"`
		Prefix    string `json:"prefix"`
	}
	if err := json.Unmarshal(raw, &tr); err != nil || !tr.Truncated || tr.Bytes != size || tr.Prefix == "" {
		t.Fatalf("%s: %.100s… (%v), want a truncated value of %d bytes", what, raw, err, size)
	}
	if len(raw) > boundedRendering {
		t.Fatalf("%s: rendered %d bytes, want at most %d", what, len(raw), boundedRendering)
	}
}

// TestHubBoundsAHugeValue updates a row the hub holds to a text and a bytea
// of 10 MB each: the row held, the change retained for resuming clients,
// the message queued for a stream client, a resumed client's message and
// /rows/{key} are all bounded and mark the values truncated, and an
// update that leaves the values unchanged (TOASTed) keeps the marks.
func TestHubBoundsAHugeValue(t *testing.T) {
	q := newQueueHub(t, nil)
	q.commit(store.Change{Op: store.OpInsert, New: docRow(1, []byte("short"), []byte{1})})
	q.poll()
	h := q.hub
	live := newSubscriber(64 << 20)
	if _, _, _, err := h.subscribe(live, nil, ""); err != nil {
		t.Fatal(err)
	}
	resumeFrom := h.offsetString(h.Offset())

	body, data := hugeDoc()
	q.commit(store.Change{Op: store.OpUpdate, New: docRow(1, body, data)})
	q.poll()

	ts := h.tables["public.docs"]
	row := ts.rows["[1]"]
	if row == nil {
		t.Fatal("row 1 is not held")
	}
	checkTruncated(t, "held body", row.json["body"], len(body))
	checkTruncated(t, "held data", row.json["data"], len(data))
	if ts.bytes > 2*boundedRendering || row.bytes > 2*boundedRendering {
		t.Fatalf("the table counts %d bytes, the row %d: want its rendered size", ts.bytes, row.bytes)
	}
	last := h.retained[len(h.retained)-1]
	if len(last.changes) != 1 {
		t.Fatalf("retained %d changes, want 1", len(last.changes))
	}
	checkTruncated(t, "retained body", last.changes[0].Row["body"], len(body))
	if h.retainedBytes > 3*boundedRendering {
		t.Fatalf("retained transactions count %d bytes, want their rendered size", h.retainedBytes)
	}

	// The message queued for the connected client.
	var msg []byte
	for len(live.send) > 0 {
		msg = <-live.send
	}
	if len(msg) > 3*boundedRendering {
		t.Fatalf("the client was sent %d bytes", len(msg))
	}
	var changes Changes
	if err := json.Unmarshal(msg, &changes); err != nil || len(changes.Txns) != 1 || len(changes.Txns[0].Changes) != 1 {
		t.Fatalf("the client was sent %.200s (%v), want one change", msg, err)
	}
	checkTruncated(t, "streamed body", changes.Txns[0].Changes[0].Row["body"], len(body))
	checkTruncated(t, "streamed data", changes.Txns[0].Changes[0].Row["data"], len(data))

	// A client resuming from before the update.
	first, _, _, err := h.subscribe(newSubscriber(64<<20), nil, resumeFrom)
	if err != nil || len(first) != 2 {
		t.Fatalf("resume: %v, %d messages, want the hello and the changes", err, len(first))
	}
	resumed, err := json.Marshal(first[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed) > 3*boundedRendering {
		t.Fatalf("a resuming client was sent %d bytes", len(resumed))
	}

	// /rows/{key}.
	srv := httptest.NewServer(NewServer(Config{}, h, stubAgent{}, nil, nil).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/tables/public.docs/rows/1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || len(got) > 3*boundedRendering {
		t.Fatalf("/rows/1: status %d, %d bytes (%v)", resp.StatusCode, len(got), err)
	}
	var served Row
	if err := json.Unmarshal(got, &served); err != nil {
		t.Fatal(err)
	}
	checkTruncated(t, "served body", served.Values["body"], len(body))

	// An update leaving the TOASTed values unchanged keeps the marks.
	q.commit(store.Change{Op: store.OpUpdate, New: []store.Value{{Kind: store.KindInt32, Int: 1}, {Kind: store.KindUnchanged}, {Kind: store.KindUnchanged}}})
	q.poll()
	checkTruncated(t, "body after an update of other columns", ts.rows["[1]"].json["body"], len(body))
}

// TestHubPollOfAHugeValueRendersOnlyItsStart applies an update to a text
// of 10 MB: the hub allocates about the value once, reading it from the
// queue, and does not copy or escape it whole to render it.
func TestHubPollOfAHugeValueRendersOnlyItsStart(t *testing.T) {
	q := newQueueHub(t, nil)
	q.commit(store.Change{Op: store.OpInsert, New: docRow(1, []byte("short"), nil)})
	q.poll()
	body, _ := hugeDoc()
	q.commit(store.Change{Op: store.OpUpdate, New: docRow(1, body, nil)})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	q.poll()
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(body))*3/2 {
		t.Fatalf("applying a value of %d bytes allocated %d bytes", len(body), n)
	}
}

// TestHubRendersAValueWithinTheBoundWhole updates a row to a text of the
// bound's size: it is held and streamed as it is, with no marker.
func TestHubRendersAValueWithinTheBoundWhole(t *testing.T) {
	q := newQueueHub(t, nil)
	body := strings.Repeat("b", testMaxValue)
	q.commit(store.Change{Op: store.OpInsert, New: docRow(1, []byte(body), nil)})
	q.poll()
	want, _ := json.Marshal(body)
	if got := q.hub.tables["public.docs"].rows["[1]"].json["body"]; !bytes.Equal(got, want) {
		t.Fatalf("held body of %d bytes, want the value itself", len(got))
	}
}

// TestHubBoundsAHugeValueOfATableServedFromItsMirror updates a row of a
// table whose rows the hub does not keep: the change, which such a table
// keeps unrendered until a client is sent it, is rendered at once, so that
// the hub retains it bounded, not the value whole.
func TestHubBoundsAHugeValueOfATableServedFromItsMirror(t *testing.T) {
	q := newQueueHub(t, func(h *Hub) { h.maxRows = 0 })
	q.commit(store.Change{Op: store.OpInsert, New: docRow(1, []byte("short"), nil)})
	q.poll()
	if ts := q.hub.tables["public.docs"]; ts == nil || !ts.overflow {
		t.Fatal("the table is not served from its mirror")
	}
	body, data := hugeDoc()
	q.commit(store.Change{Op: store.OpUpdate, New: docRow(1, body, data)})
	q.poll()
	last := q.hub.retained[len(q.hub.retained)-1]
	if len(last.changes) != 1 || last.changes[0].raw != nil {
		t.Fatalf("retained %d changes, the first unrendered: want it rendered", len(last.changes))
	}
	checkTruncated(t, "retained body", last.changes[0].Row["body"], len(body))
	checkTruncated(t, "retained data", last.changes[0].Row["data"], len(data))
	if last.bytes > 3*boundedRendering {
		t.Fatalf("the retained transaction counts %d bytes, want its rendered size", last.bytes)
	}
}

// TestMirrorRowOfAHugeValueIsBounded renders a mirror row holding a 10 MB
// text, as a page, a time travel or a restarted hub reads it: the value is
// truncated, and the key is whole.
func TestMirrorRowOfAHugeValueIsBounded(t *testing.T) {
	q := newQueueHub(t, nil)
	h := q.hub
	ms := &mirrorScan{types: h.types, rel: q.rel, deleted: -1, maxValue: h.maxValue,
		schema: delta.NewStructType(delta.NewField("id", delta.TypeInteger, false), delta.NewField("body", delta.TypeString, true),
			delta.NewField("data", delta.TypeBinary, true))}
	ms.setFields()
	body, data := hugeDoc()
	r := delta.Row{int32(7), string(body), data}
	key := ms.keyVals(r)
	row := ms.render(keyedRow{vals: key, row: r})
	if row.Key != "[7]" || len(key) != 1 || key[0].Int != 7 {
		t.Fatalf("key %q %+v, want [7]", row.Key, key)
	}
	checkTruncated(t, "mirror body", row.Values["body"], len(body))
	checkTruncated(t, "mirror data", row.Values["data"], len(data))
	if got := string(row.Values["id"]); got != "7" {
		t.Fatalf("id %s, want 7", got)
	}
}

// stubAgent is the server's Agent for tests without a source.
type stubAgent struct{}

func (stubAgent) Status() (any, error) { return map[string]any{}, nil }
func (stubAgent) Ready() error         { return nil }
