// Package agent wires a running Lakeside agent together: the state file, the
// replication source, and the control socket that answers status queries.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/lakeside/lakeside/agent/source"
	"github.com/lakeside/lakeside/store"
)

// SocketName is the control socket's name inside the state directory.
const SocketName = "lakeside.sock"

// Agent is one running agent.
type Agent struct {
	cfg *Config
	log *slog.Logger

	db  *store.DB
	src *source.Source
}

// New returns an agent for cfg; nothing starts until Run.
func New(cfg *Config, log *slog.Logger) *Agent {
	if log == nil {
		log = slog.Default()
	}
	return &Agent{cfg: cfg, log: log}
}

// SourceConfig converts the configuration for the replication source.
func (c *Config) SourceConfig(log *slog.Logger) source.Config {
	return source.Config{
		DSN:            c.Source.DSN,
		Slot:           c.Source.Slot,
		Publication:    c.Source.Publication,
		Tables:         c.Source.Tables,
		Snapshot:       c.Source.Snapshot == SnapshotInitial,
		StatusInterval: c.Source.StatusInterval,
		Logger:         log,
	}
}

// Open opens the state file and prepares the source. Run calls it when it
// was not called before.
func (a *Agent) Open() error {
	if a.db != nil {
		return nil
	}
	db, err := store.Open(a.cfg.StateDir, store.Options{})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w: is another lakeside running with state_dir %s?", err, a.cfg.StateDir)
	}
	if err != nil {
		return err
	}
	a.db = db
	a.src = source.New(a.cfg.SourceConfig(a.log.With("component", "source")), db)
	return nil
}

// DB returns the open state file (nil before Open).
func (a *Agent) DB() *store.DB { return a.db }

// Source returns the replication source (nil before Open).
func (a *Agent) Source() *source.Source { return a.src }

// Run runs the agent until ctx is cancelled or a fatal error occurs. A clean
// shutdown returns nil after everything received is durable and acknowledged.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Open(); err != nil {
		return err
	}
	defer a.db.Close()

	sock := filepath.Join(a.cfg.StateDir, SocketName)
	_ = os.Remove(sock) // left behind by a crash; the state file's lock says no agent runs
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	srv := &http.Server{Handler: a.controlHandler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		os.Remove(sock)
	}()

	a.log.Info("agent starting", "state_dir", a.cfg.StateDir, "slot", a.cfg.Source.Slot, "tables", len(a.cfg.Source.Tables))
	err = a.src.Run(ctx)
	if err != nil {
		return err
	}
	a.log.Info("agent stopped")
	return nil
}
