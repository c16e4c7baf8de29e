package source

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/lakeside/lakeside/store"
)

// tableMessagePrefix is the prefix of the logical decoding messages the
// catalog watcher emits (pg_logical_emit_message, not transactional): what
// it saw in the catalog, placed in the stream where it saw it, so that the
// stream acts on it in order with the changes.
const tableMessagePrefix = "lakeside.table"

// Kinds of tableMessage.
const (
	// kindRecreated: the captured table OldOID was dropped and OID
	// created under its configured name; OID is captured as the next
	// generation of Table from the message on.
	kindRecreated = "recreated"
	// kindSchema: the schema of the captured table OID is Relation from
	// the message on.
	kindSchema = "schema"
)

// tableMessage is the content of a tableMessagePrefix message, in JSON.
type tableMessage struct {
	// Slot is the slot of the agent that emitted it: every slot of the
	// database decodes the message, and other agents pass it over.
	Slot string `json:"slot"`
	Kind string `json:"kind"`
	// Table is the name the table is captured as (its identity).
	Table  string `json:"table"`
	OID    uint32 `json:"oid"`
	OldOID uint32 `json:"old_oid,omitempty"`
	// Time is when the watcher saw the change, the commit time of the
	// truncate a re-creation queues.
	Time     time.Time        `json:"time"`
	Relation *messageRelation `json:"relation,omitempty"`
}

// messageRelation is a schema version in a tableMessage: what
// relationFromCatalog read, under a lock that kept the table's schema
// from changing until the message was in the WAL.
type messageRelation struct {
	Schema          string          `json:"schema"`
	Name            string          `json:"name"`
	ReplicaIdentity string          `json:"replica_identity"`
	Columns         []messageColumn `json:"columns"`
	FileNode        uint32          `json:"filenode,omitempty"`
	ColumnsStamp    int64           `json:"stamp,omitempty"`
	KeyStamp        int64           `json:"key_stamp,omitempty"`
}

type messageColumn struct {
	Name       string `json:"name"`
	TypeOID    uint32 `json:"type"`
	TypeMod    int32  `json:"typmod"`
	Key        bool   `json:"key,omitempty"`
	PrimaryKey bool   `json:"pk,omitempty"`
	Dims       int    `json:"dims,omitempty"`
	AttNum     int    `json:"attnum,omitempty"`
	// Missing is the column's missing value (store.Column.Missing),
	// when it has one.
	Missing *string `json:"missing,omitempty"`
}

func toMessageRelation(r *store.Relation) *messageRelation {
	m := &messageRelation{Schema: r.Schema, Name: r.Name, ReplicaIdentity: string(r.ReplicaIdentity), Columns: make([]messageColumn, len(r.Columns)),
		FileNode: r.FileNode, ColumnsStamp: r.ColumnsStamp, KeyStamp: r.KeyStamp}
	for i, c := range r.Columns {
		m.Columns[i] = messageColumn{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Key: c.Key, PrimaryKey: c.PrimaryKey, Dims: c.Dims,
			AttNum: c.AttNum}
		if c.HasMissing {
			m.Columns[i].Missing = &c.Missing
		}
	}
	return m
}

// relation returns the schema version of oid, captured as table, that m
// describes.
func (m *messageRelation) relation(oid uint32, table string) (*store.Relation, error) {
	if len(m.ReplicaIdentity) != 1 || len(m.Columns) == 0 {
		return nil, fmt.Errorf("schema of table %d: replica identity %q, %d columns", oid, m.ReplicaIdentity, len(m.Columns))
	}
	r := &store.Relation{Key: store.RelationKey{OID: oid}, Schema: m.Schema, Name: m.Name, Table: table,
		ReplicaIdentity: m.ReplicaIdentity[0], Columns: make([]store.Column, len(m.Columns)), FileNode: m.FileNode,
		ColumnsStamp: m.ColumnsStamp, KeyStamp: m.KeyStamp}
	for i, c := range m.Columns {
		r.Columns[i] = store.Column{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Key: c.Key, PrimaryKey: c.PrimaryKey, Dims: c.Dims,
			AttNum: c.AttNum}
		if c.Missing != nil {
			r.Columns[i].HasMissing, r.Columns[i].Missing = true, *c.Missing
		}
	}
	return r, nil
}

// tableMessage acts on a message of the catalog watcher where the stream
// has reached it. A message of another agent's slot, about a table not
// captured, or already acted on (sent again after a restart) is passed
// over.
func (st *stream) tableMessage(ctx context.Context, m *pglogrepl.LogicalDecodingMessage) error {
	if m.Transactional {
		return nil
	}
	var tm tableMessage
	if err := json.Unmarshal(m.Content, &tm); err != nil {
		st.s.log.Warn("passing over a malformed catalog message", "prefix", m.Prefix, "lsn", store.LSN(m.LSN).String(), "err", err)
		return nil
	}
	if tm.Slot != st.s.cfg.Slot {
		return nil
	}
	at := store.LSN(m.LSN)
	switch tm.Kind {
	case kindRecreated:
		return st.recreated(ctx, &tm, at)
	case kindSchema:
		t := st.tables[tm.OID]
		if t == nil || t.identity != tm.Table || tm.Relation == nil {
			return nil
		}
		rel, err := tm.Relation.relation(tm.OID, t.identity)
		if err != nil {
			st.s.log.Warn("passing over a malformed catalog message", "prefix", m.Prefix, "lsn", at.String(), "err", err)
			return nil
		}
		// The next Relation message is compared with this version, not
		// with the one last described.
		delete(st.described, tm.OID)
		return st.recordVersion(rel, at)
	}
	return nil
}

// recreated takes a re-created table over as the next generation of the
// captured table it replaces: the changelog gets a truncate of the table
// at the message (a transaction of its own, ending just past it, queued
// with the new generation in one write), and the new OID's changes are
// captured from here on. The new table's rows are copied by Config.Backfill,
// which the watcher asks for once the truncate is durable.
func (st *stream) recreated(ctx context.Context, tm *tableMessage, at store.LSN) error {
	old := st.tables[tm.OldOID]
	if old == nil || old.identity != tm.Table {
		return nil // taken over already, or not captured
	}
	if other := st.tables[tm.OID]; other != nil {
		st.s.log.Warn("passing over a re-creation of a table captured already", "table", tm.Table, "oid", tm.OID, "captured_as", other.identity)
		return nil
	}
	end := at + 1
	if end <= st.lastQueued {
		return nil
	}
	op := writeOp{kind: opNewGeneration, gen: &newGeneration{table: old.identity, oid: tm.OID, since: end, backfill: ReasonRecreated}}
	key, found := store.RelationKey{}, false
	if rd, ok := st.rels[tm.OldOID]; ok {
		key, found = rd.rel.Key, true
	} else {
		newest, err := st.newestVersion(tm.OldOID)
		if err != nil {
			return err
		}
		if newest != nil {
			key, found = newest.Key, true
		}
	}
	if tm.Time.IsZero() {
		tm.Time = time.Now()
	}
	if found {
		// A table never described holds nothing in Delta to truncate.
		op.txn = &store.Txn{TxnHeader: store.TxnHeader{CommitLSN: at, EndLSN: end, CommitTime: tm.Time},
			Changes: []store.Change{{Op: store.OpTruncate, Relation: key}}}
		st.lastQueued = end
		st.s.txnsQueued.Add(1)
	}
	if err := st.s.writer.send(op); err != nil {
		return err
	}
	t := *old
	t.oid, t.current, t.generation = tm.OID, t.configured, old.generation+1
	delete(st.tables, tm.OldOID)
	st.tables[tm.OID] = &t
	st.s.log.Warn("a captured table was dropped and created again; its new table is captured as the next generation into the same Delta tables, after a truncate in the changelog, and its rows are copied",
		"table", t.configured.String(), "delta_table", t.identity, "old_oid", tm.OldOID, "oid", tm.OID, "generation", t.generation, "lsn", end.String())
	st.s.noteTable(t.identity, func(s *TableStatus) {
		s.OID, s.Generation, s.PostgresName = t.oid, t.generation, t.current.String()
		s.Event, s.EventTime = fmt.Sprintf("re-created at %s (OID %d was dropped)", end, tm.OldOID), time.Now()
	})
	if m := st.passedOver[tm.OID]; m != nil {
		// PostgreSQL described the new table before it was captured
		// (a publication FOR ALL TABLES), and does not again.
		delete(st.ignored, tm.OID)
		delete(st.passedOver, tm.OID)
		return st.relation(ctx, m, at)
	}
	return nil
}
