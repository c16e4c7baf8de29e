package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// statusEvery is how often the service manager's status line is refreshed
// when no watchdog asks for more.
const statusEvery = 10 * time.Second

// notifySystemd speaks the service manager's notify protocol when it
// started the agent (NOTIFY_SOCKET is set): READY=1 once PostgreSQL is
// connected and the queue is open, a STATUS= line, WATCHDOG=1 only while
// the agent is alive, and STOPPING=1 when it shuts down. It returns when ctx
// ends.
func (a *Agent) notifySystemd(ctx context.Context) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return
	}
	notify := func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			a.log.Warn("notify service manager", "err", err)
		}
	}
	select {
	case <-ctx.Done():
		notify("STOPPING=1")
		return
	case <-a.src.Connected():
	}
	notify("READY=1\nSTATUS=" + a.statusLine())
	a.log.Info("ready: told the service manager")

	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		a.log.Warn("service manager watchdog", "err", err)
	}
	every := statusEvery
	if watchdog > 0 {
		// Two pings per interval leave room for one late tick.
		every = min(every, watchdog/2)
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	var stuck error
	for {
		select {
		case <-ctx.Done():
			notify("STOPPING=1")
			return
		case <-ticker.C:
		}
		state := "STATUS=" + a.statusLine()
		if watchdog > 0 {
			err := a.alive(every)
			switch {
			case err == nil:
				state = "WATCHDOG=1\n" + state
				if stuck != nil {
					a.log.Info("agent is responsive again; watchdog pings resumed")
				}
			case stuck == nil:
				a.log.Error("agent is stuck; watchdog pings withheld so that the service manager restarts it", "err", err)
			}
			stuck = err
		}
		notify(state)
	}
}

// alive reports whether the agent's main loops still turn: the capture loop
// keeps its heartbeat, and the status, which reads every stage and the
// state file, answers within timeout.
func (a *Agent) alive(timeout time.Duration) error {
	if !a.src.Alive() {
		return errors.New("the capture loop has not turned in time")
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Status()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("status did not answer within %s", timeout)
	}
}

// statusLine is a one-line summary for the service manager's status.
func (a *Agent) statusLine() string {
	src := a.src.Status()
	line := src.State
	if fs := a.app.Failures(); len(fs) > 0 {
		line = applyFailingLine(fs) + "; capture " + line
	}
	if src.ServerWALEnd > src.ConfirmedLSN {
		line += fmt.Sprintf(", slot lag %s", FormatBytes(int64(src.ServerWALEnd-src.ConfirmedLSN)))
	}
	if a.up != nil {
		st := a.up.Status()
		var versions int64
		for _, t := range st.Tables {
			versions += t.BacklogVersions
		}
		if st.Online {
			line += fmt.Sprintf(", replica online, %d versions to upload", versions)
		} else {
			line += fmt.Sprintf(", replica offline, %d versions to upload", versions)
		}
	}
	return line
}
