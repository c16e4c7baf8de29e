package applier

import (
	"context"

	"github.com/lakeside/lakeside/store"
)

// adder adds the changes a flush reads to the changelogs and mirrors in a
// goroutine of its own, while the flush goes on reading the queue (and
// converting the values of changes other than inserts, which the adder
// writes as queued): the two halves of reading a large batch then run
// side by side, on a machine with a second core (measured on two cores
// when values were all converted by the reading side, a 1M-row
// transaction was read in 0.76 s instead of 0.86 s). Changes are added in
// the order they are read. Reading ahead, which shares capture's core,
// adds them itself.
//
// The adding goroutine touches the changelog, the mirror and the columns
// of the tables it is given, and the converters and putters of the
// mappings for its side (relMapping.onAdder); the reading side changes a
// table's columns only after sync, when the adder is idle (see
// Applier.applyChange).
//
// A performance trick, measured by BenchmarkApplyLargeTransaction and the
// tests of tuning_adder_test.go; switched off by Config.Off.Adder
// (LAKESIDE_TUNING_OFF=adder for the agent), which has the flush add what
// it reads itself.
type adder struct {
	a     *Applier
	work  chan []addition
	batch []addition
	// free holds batches added, emptied, for add to fill again: as many
	// as can be handed over at once (work's four, the one being added and
	// the one filling).
	free chan []addition
	// pool takes back the memory of the chunks whose changes are added.
	pool *store.ChunkPool
	// synced answers a nil batch, which asks whether all before it is
	// added; done is closed when the goroutine ends.
	synced, done chan struct{}
	// header is the copy of the header of the transaction being read that
	// its additions share (the queue reuses its own).
	header *store.TxnHeader
	// batchBytes is the bytes of converted values the batch holds.
	batchBytes int
}

// addition is one change for its table's changelog, mirror or both: its
// converted values (rc), or, for an insert, its values as queued (ins, of
// schema version m), which are valid until the chunk they were read from
// goes back to the pool. An addition with no table (st nil) is that: the
// memory of a chunk (mem) that no addition after it uses, to put back
// once the additions before it are added.
type addition struct {
	st  *sourceTable
	h   *store.TxnHeader
	seq int64
	rc  *rowChange
	m   *relMapping
	ins []store.Value
	// op is the operation of an ins: OpInsert or OpSnapshot.
	op         store.Op
	toCL, toMR bool
	mem        *store.ChunkMemory
	// size is the bytes of the values converted for rc, which, unlike
	// the values of ins (views of the state file), are held in memory.
	size int
}

// additionBatch is how many changes are handed over at a time, and
// additionBytes how many bytes of converted values: at most six batches
// are in memory at once (work's four, the one being added and the one
// filling).
const (
	additionBatch = 256
	additionBytes = 4 << 20
)

// newAdder starts the adding goroutine of a flush whose chunks are read
// into memory from pool.
func newAdder(ctx context.Context, a *Applier, pool *store.ChunkPool) *adder {
	d := &adder{a: a, work: make(chan []addition, 4), free: make(chan []addition, 6), pool: pool,
		synced: make(chan struct{}), done: make(chan struct{}), batch: make([]addition, 0, additionBatch)}
	go d.run(ctx)
	return d
}

func (d *adder) run(ctx context.Context) {
	defer close(d.done)
	for batch := range d.work {
		if batch == nil {
			d.synced <- struct{}{}
			continue
		}
		for i := range batch {
			x := &batch[i]
			if x.st == nil {
				d.pool.Put(x.mem)
				continue
			}
			if x.st.failed() != nil {
				continue
			}
			if err := d.a.addChange(ctx, x); err != nil {
				x.st.fail(err)
			}
		}
		clear(batch)
		select {
		case d.free <- batch[:0]:
		default:
		}
	}
}

// add queues one change. Its transaction header is copied once per
// transaction. A change that cannot be added fails its table
// (sourceTable.fail).
func (d *adder) add(x addition) {
	if d.header == nil || *d.header != *x.h {
		c := *x.h
		d.header = &c
	}
	x.h = d.header
	d.queue(x)
}

// release queues putting a chunk's memory back into the pool once the
// changes queued before, which may use it, are added.
func (d *adder) release(mem *store.ChunkMemory) {
	d.queue(addition{mem: mem})
}

// queue appends x to the batch, and hands the batch over once it is full.
func (d *adder) queue(x addition) {
	d.batch = append(d.batch, x)
	d.batchBytes += x.size
	if len(d.batch) == additionBatch || d.batchBytes >= additionBytes {
		d.batchBytes = 0
		d.work <- d.batch
		select {
		case d.batch = <-d.free:
		default:
			d.batch = make([]addition, 0, additionBatch)
		}
	}
}

// sync waits until every change queued is added.
func (d *adder) sync() {
	if len(d.batch) > 0 {
		d.batchBytes = 0
		d.work <- d.batch
		d.batch = make([]addition, 0, additionBatch)
	}
	d.work <- nil
	<-d.synced
}

// close waits until every change queued is added and ends the goroutine.
func (d *adder) close() {
	if len(d.batch) > 0 {
		d.work <- d.batch
		d.batch = nil
	}
	close(d.work)
	<-d.done
}

// addChange adds one change to its table's changelog and mirror.
func (a *Applier) addChange(ctx context.Context, x *addition) error {
	if x.rc == nil {
		if x.toCL {
			if err := x.st.changelog.addInsert(a, x.h, x.seq, x.op, x.m, x.ins); err != nil {
				return err
			}
		}
		if x.toMR {
			return x.st.mirror.addInsert(ctx, a, x.m, x.ins, x.toCL, changesAhead(x.h, x.seq))
		}
		return nil
	}
	if x.toCL {
		if err := x.st.changelog.add(a, x.h, x.seq, x.rc); err != nil {
			return err
		}
	}
	if x.toMR {
		if err := x.st.mirror.add(ctx, a, x.rc); err != nil {
			return err
		}
	}
	return nil
}
