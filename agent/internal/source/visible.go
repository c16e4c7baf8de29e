package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lakeside/lakeside/internal/backoff"
)

// visibleWait bounds stream.awaitCommitVisible. The stream answers no keepalive
// while it waits; past the bound it reconnects, and decodes the
// transaction again.
const visibleWait = 10 * time.Second

// errNotVisible tells that a transaction the stream decoded has not become
// visible to other sessions within visibleWait.
var errNotVisible = errors.New("transaction committed but not visible yet")

// awaitCommitVisible waits until the transaction the stream decodes, when
// it is committed, is visible to new snapshots, so that a catalog read
// shows its schema changes, and reports whether it is committed (a
// streamed one is still in progress: its changes are not in the catalog
// until it commits). PostgreSQL writes a commit to the WAL, where the
// walsender decodes it, a moment before it makes the transaction visible,
// and a synchronous standby holds it back for as long as the standby takes
// to confirm it. The wait ends with ctx.
func (st *stream) awaitCommitVisible(ctx context.Context) (bool, error) {
	if st.inStream || !st.inTxn {
		return false, nil
	}
	xid := st.txn.Xid
	if xid == st.visibleXid {
		return true, nil
	}
	wait := cmp.Or(st.s.visibleWait, visibleWait)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// The snapshot is looked at again after 1 ms, doubling to 100 ms.
	retry := backoff.New(backoff.Policy{Min: time.Millisecond, Max: 100 * time.Millisecond, Factor: 2})
	for {
		var snap string
		err := st.sql.QueryRow(wctx, `SELECT pg_current_snapshot()::text`).Scan(&snap)
		if err != nil && wctx.Err() == nil {
			return false, fmt.Errorf("read a snapshot: %w", err)
		}
		if err == nil {
			visible, err := visibleIn(snap, xid)
			if err != nil {
				return false, err
			}
			if visible {
				st.visibleXid = xid
				return true, nil
			}
		}
		if retry.Wait(wctx) != nil {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("wait for transaction %d to be visible: %w", xid, err)
			}
			return false, fmt.Errorf("%w: transaction %d, within %s (a synchronous standby may hold it back); its schema change is read again after a reconnect",
				errNotVisible, xid, wait)
		}
	}
}

// visibleIn reports whether the transaction of 32-bit id xid is visible in
// snapshot, the text of a pg_snapshot ("xmin:xmax:xip,..."). The
// transaction is taken to be within 2^31 transactions of the snapshot's
// xmax, as one the stream decodes now is.
func visibleIn(snapshot string, xid uint32) (bool, error) {
	parts := strings.Split(snapshot, ":")
	if len(parts) != 3 {
		return false, fmt.Errorf("read a snapshot: %q is not a pg_snapshot", snapshot)
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return false, fmt.Errorf("read a snapshot %q: %w", snapshot, err)
	}
	// The full id of xid: the one nearest xmax with its low 32 bits.
	full := int64(xmax) - int64(int32(uint32(xmax)-xid))
	if full >= int64(xmax) {
		return false, nil
	}
	if full < int64(xmin) || parts[2] == "" {
		return true, nil
	}
	running := strings.Split(parts[2], ",")
	return !slices.Contains(running, strconv.FormatInt(full, 10)), nil
}
