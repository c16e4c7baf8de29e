package agent

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/store"
)

// TestReadStatusAsksAStartingAgentAgain checks that ReadStatus, finding no
// control socket while an agent holds the state file, asks the socket
// again once the wait for the file's lock has failed: an agent that was
// starting answers then. One that never answers is still reported so.
func TestReadStatusAsksAStartingAgentAgain(t *testing.T) {
	stateDir := t.TempDir()
	cfg := &config.Config{StateDir: stateDir}
	db, err := store.Open(stateDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// The agent opens its control socket a moment after the state file.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(&Status{Running: true, State: "snapshot"})
	})}
	defer srv.Close()
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		time.Sleep(300 * time.Millisecond)
		ln, err := net.Listen("unix", filepath.Join(stateDir, SocketName))
		if err != nil {
			t.Error(err)
			return
		}
		go srv.Serve(ln)
	}()
	st, err := ReadStatus(t.Context(), cfg)
	if err != nil {
		t.Fatalf("status of an agent that opened its socket while asked: %v", err)
	}
	if !st.Running || st.State != "snapshot" {
		t.Fatalf("status %+v, want the agent's own (running, snapshot)", st)
	}

	<-opened
	srv.Close()
	if _, err := ReadStatus(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("status while an agent holds the state file without answering: %v", err)
	}
}
