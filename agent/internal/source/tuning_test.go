package source

import "testing"

// TestPlainConnectionCaptures captures with the pollConn trick switched
// off (Config.Off.PollConn): the snapshot and the stream, a large
// transaction among them, replay to the table PostgreSQL holds.
func TestPlainConnectionCaptures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable, `INSERT INTO items SELECT g, g, 'seed' FROM generate_series(1, 1000) g`)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.Off.PollConn = true
	h.start()
	h.waitStreaming()
	h.exec(`UPDATE items SET v = v + 1 WHERE id % 3 = 0`, `DELETE FROM items WHERE id % 5 = 0`,
		`INSERT INTO items SELECT g, g, 'bulk' FROM generate_series(1001, 30000) g`)
	h.waitXid(h.xid(`INSERT INTO items VALUES (100000, 1, 'last')`))
	h.checkItems()
}
