package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/internal/pgcluster"
	"github.com/lakeside/lakeside/store"
)

// demoCommand runs the agent on a throwaway PostgreSQL with an inventory
// workload and prints what it captures.
type demoCommand struct {
	stdout, stderr io.Writer
	duration       time.Duration
	stateDir       string
	listen         string
}

func (c *demoCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside demo", flag.ContinueOnError)
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0: run until interrupted)")
	fs.StringVar(&c.stateDir, "state-dir", "", "directory for the state, the Delta tables and the replica (default: a temporary one)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address of the live view")
	return fs.Parse(args)
}

const demoSchema = `
CREATE TABLE products (
	id         serial PRIMARY KEY,
	sku        text NOT NULL UNIQUE,
	name       text NOT NULL,
	price      numeric(10,2) NOT NULL,
	tags       text[] NOT NULL DEFAULT '{}',
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE stock (
	product_id int PRIMARY KEY REFERENCES products(id) ON DELETE CASCADE,
	quantity   int NOT NULL,
	location   text NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO products (sku, name, price, tags)
SELECT 'SKU-' || g, 'Product ' || g, round((random() * 100)::numeric, 2), ARRAY['demo']
FROM generate_series(1, 50) g;
INSERT INTO stock (product_id, quantity, location)
SELECT id, (random() * 100)::int, 'aisle ' || (id % 7 + 1) FROM products;
`

func (c *demoCommand) Run(ctx context.Context) error {
	// Run as `make demo | tee demo.log`, the pipe's reader dies with the
	// same Ctrl-C: a write to it must fail, not kill the demo before it
	// removes its PostgreSQL and its directories.
	signal.Ignore(syscall.SIGPIPE)
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fmt.Fprintln(c.stdout, "starting a throwaway PostgreSQL …")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Logger: log})
	if err != nil {
		return err
	}
	defer cluster.Stop(context.WithoutCancel(ctx))
	if err := cluster.CreateDatabase(ctx, "shop"); err != nil {
		return err
	}
	if err := cluster.Exec(ctx, "shop", demoSchema); err != nil {
		return fmt.Errorf("create demo schema: %w", err)
	}

	dir := c.stateDir
	if dir == "" {
		dir, err = os.MkdirTemp("", "lakeside-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	// The demo writes a configuration file like an operator would, so it
	// runs with exactly the defaults and checks of a real installation.
	yaml := fmt.Sprintf(`source:
  dsn: %q
  tables: [public.products, public.stock]
state_dir: %s
delta:
  flush_interval: 1s
replica:
  url: file://%s
  site: demo-branch
  poll_interval: 1s
http:
  listen: %s
`, cluster.DSN("shop"), filepath.Join(dir, "state"), filepath.Join(dir, "replica"), c.listen)
	cfg, err := config.Parse("demo.yaml", []byte(yaml))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "PostgreSQL:   %s\n", cluster.DSN("shop"))
	fmt.Fprintf(c.stdout, "queue:        %s\n", cfg.StateDir)
	fmt.Fprintf(c.stdout, "Delta tables: %s\n", cfg.Delta.TablesDir)
	fmt.Fprintf(c.stdout, "replica:      %s\n", cfg.Replica.Target())
	fmt.Fprintf(c.stdout, "live view:    http://%s/\n", c.listen)
	fmt.Fprintln(c.stdout, "capturing public.products and public.stock; press Ctrl-C to stop")

	a := agent.New(cfg, log, Version)
	if err := a.Open(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	go runDemoWorkload(ctx, cluster.DSN("shop"), log)
	printer := &capturePrinter{w: c.stdout, db: a.DB()}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case err := <-done:
			printer.print()
			return err
		case <-tick.C:
			printer.print()
			if n%10 == 9 {
				printTables(c.stdout, a)
			}
		}
	}
}

// runDemoWorkload changes stock levels and prices steadily, with an
// occasional new product, until ctx ends.
func runDemoWorkload(ctx context.Context, dsn string, log *slog.Logger) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		log.Error("demo workload", "err", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for n := 0; ctx.Err() == nil; n++ {
		var err error
		switch {
		case n%20 == 19:
			_, err = conn.Exec(ctx, `WITH p AS (INSERT INTO products (sku, name, price) VALUES ($1, $2, $3) RETURNING id)
				INSERT INTO stock (product_id, quantity, location) SELECT id, 10, 'receiving' FROM p`,
				fmt.Sprintf("SKU-N%d", n), fmt.Sprintf("New product %d", n), rand.IntN(10000)/100.0)
		case n%7 == 6:
			_, err = conn.Exec(ctx, `UPDATE products SET price = price * 1.05, updated_at = now() WHERE id = $1`, 1+rand.IntN(50))
		default:
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				for i := 0; i < 1+rand.IntN(3); i++ {
					if _, err := tx.Exec(ctx, `UPDATE stock SET quantity = greatest(quantity + $2, 0), updated_at = now() WHERE product_id = $1`,
						1+rand.IntN(50), rand.IntN(21)-10); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("demo workload", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// printTables prints the Delta tables' local and replicated versions.
func printTables(w io.Writer, a *agent.Agent) {
	st, err := a.Status()
	if err != nil {
		return
	}
	var parts []string
	for _, t := range st.Tables {
		remote := "-"
		if t.RemoteVersion != nil {
			remote = fmt.Sprint(*t.RemoteVersion)
		}
		parts = append(parts, fmt.Sprintf("%s v%d (replica v%s)", t.Name, t.Version, remote))
	}
	fmt.Fprintf(w, "delta tables: %s\n", strings.Join(parts, ", "))
}

// capturePrinter prints the transactions that reached the queue.
type capturePrinter struct {
	w    io.Writer
	db   *store.DB
	last store.LSN
	rels map[store.RelationKey]*store.Relation
}

func (p *capturePrinter) print() {
	_ = p.db.View(func(r *store.Reader) error {
		rels, err := r.Relations()
		if err != nil {
			return err
		}
		p.rels = rels
		return r.Txns(p.last, func(h *store.TxnHeader, t *store.TxnCursor) error {
			p.last = h.EndLSN
			counts := map[string]int{}
			var order []string
			err := t.Chunks(func(changes []store.Change) error {
				for _, ch := range changes {
					name := "?"
					if rel := p.rels[ch.Relation]; rel != nil {
						name = rel.TableName()
					}
					k := ch.Op.String() + " " + name
					if counts[k] == 0 {
						order = append(order, k)
					}
					counts[k]++
				}
				return nil
			})
			if err != nil {
				return err
			}
			parts := make([]string, len(order))
			for i, k := range order {
				parts[i] = fmt.Sprintf("%d× %s", counts[k], k)
			}
			kind := "txn"
			if h.Snapshot {
				kind = "snapshot"
			}
			fmt.Fprintf(p.w, "captured %-8s xid=%-6d end_lsn=%-11s %s\n", kind, h.Xid, h.EndLSN, strings.Join(parts, ", "))
			return nil
		})
	})
}
