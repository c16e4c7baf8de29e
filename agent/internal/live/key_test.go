package live

import (
	"net/http"
	"slices"
	"testing"
)

// TestFullIdentityTableKeyedByPrimaryKey serves a table with a primary key
// under REPLICA IDENTITY FULL: the listing names the primary key as the
// key (not every column), a row is found by its primary key, and the
// streamed rows equal PostgreSQL's after updates and deletes.
func TestFullIdentityTableKeyedByPrimaryKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, stockSchema, `ALTER TABLE stock REPLICA IDENTITY FULL`)
	f.exec(`INSERT INTO stock SELECT g, g * 10, 'item ' || g FROM generate_series(1, 25) g`)
	f.exec(`UPDATE stock SET qty = qty + 1 WHERE id % 3 = 0`)
	f.exec(`DELETE FROM stock WHERE id = 7`)
	f.waitHub()

	var tables struct{ Tables []tableListing }
	if code := f.get("/api/v1/tables", &tables); code != http.StatusOK || len(tables.Tables) != 1 ||
		!slices.Equal(tables.Tables[0].Key, []string{"id"}) {
		t.Fatalf("tables: status %d, %+v; want public.stock keyed by id", code, tables)
	}
	var row Row
	if code := f.get("/api/v1/tables/public.stock/rows/12", &row); code != http.StatusOK || string(row.Values["qty"]) != "121" {
		t.Fatalf("row 12: status %d, %+v", code, row)
	}
	if code := f.get("/api/v1/tables/public.stock/rows/7", &row); code != http.StatusNotFound {
		t.Fatalf("deleted row 7: status %d", code)
	}
	c := f.dial("")
	c.readUntil(f.hub)
	equalRows(t, "streamed rows", c.rows, f.tableRows())
}
