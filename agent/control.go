package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The control socket (SocketName in the state directory) serves the running
// agent's status, runs vacuums and starts and follows resyncs on request,
// for the status, vacuum and resync commands: both ends are here.

// controlSocketMode is the control socket's file mode, whatever the umask:
// connecting needs write permission on it, and only the agent's own user
// (its owner) and root may connect. Root, who runs `lakeside status` and
// `lakeside vacuum` as a rule, passes any mode. The agent's group is there
// for the agent to read its configuration, not to run vacuums, which delete
// files.
const controlSocketMode = 0o600

// listenControl listens on the control socket at sock and gives it
// controlSocketMode. Until the chmod the socket has the umask's mode; the
// state directory (0750, the agent's user) keeps others out meanwhile.
func listenControl(sock string) (net.Listener, error) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(sock, controlSocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod: %w", err)
	}
	return ln, nil
}

// controlHandler serves the control socket.
func (a *Agent) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /vacuum", a.vacuumHandler)
	mux.HandleFunc("POST /compact", a.compactHandler)
	mux.HandleFunc("POST /resync", a.resyncHandler)
	mux.HandleFunc("GET /resync", a.followResyncHandler)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := a.Status()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	return mux
}

// controlClient returns an HTTP client that talks to the agent's control
// socket at sock.
func controlClient(sock string, timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial}}
}

// askAgent sends a request to the agent running on stateDir (method, and
// path with its query, on its control socket) and returns its reply, what
// being the reply's name in errors; it fails with ErrNoAgent when none
// answers. The request may take up to timeout.
func askAgent[R any](ctx context.Context, stateDir string, timeout time.Duration, method, path, what string) (*R, error) {
	client := controlClient(filepath.Join(stateDir, SocketName), timeout)
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://lakeside"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoAgent, err)
	}
	var rep R
	if err := readReply(resp, what, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// readReply reads the agent's reply on the control socket into v, a JSON
// object, and closes its body. A reply other than 200 OK is the agent's
// error text.
func readReply(resp *http.Response, what string, v any) error {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent %s: %s", what, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}
