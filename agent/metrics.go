package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// collector exports the agent's state as Prometheus metrics, read on each
// scrape from the same status `lakeside status` prints.
type collector struct {
	a *Agent

	confirmed, checkpoint, lag, lagSeconds    *prometheus.Desc
	queueTxns, queueBytes, paused, clients    *prometheus.Desc
	tableVersion, remoteVersion, backlogBytes *prometheus.Desc
	backlogVersions, requests, versions       *prometheus.Desc
	uploadedBytes, online                     *prometheus.Desc
	capturedTxns, receivedChanges, ignored    *prometheus.Desc
	deltaCommits, deltaFilesAdded             *prometheus.Desc
	deltaFilesRemoved, uploadErrors           *prometheus.Desc
	uploadStalls                              *prometheus.Desc
	vacuumRuns, vacuumFailures                *prometheus.Desc
	vacuumFiles, vacuumBytes, vacuumLast      *prometheus.Desc
	applyFailing, applyTableFailing, replaced *prometheus.Desc
	backfillRows, backfillChunks              *prometheus.Desc
	backfillRunning                           *prometheus.Desc
}

func (a *Agent) newMetrics() *prometheus.Registry {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("lakeside_"+name, help, labels, nil)
	}
	c := &collector{
		a:                 a,
		confirmed:         d("confirmed_lsn", "Flush position acknowledged to PostgreSQL."),
		checkpoint:        d("checkpoint_lsn", "Position durable in the queue."),
		lag:               d("slot_lag_bytes", "Server WAL end minus the acknowledged position: WAL PostgreSQL keeps for the slot."),
		lagSeconds:        d("replication_lag_seconds", "Age of the newest captured commit while behind the server."),
		queueTxns:         d("queue_transactions", "Transactions in the queue."),
		queueBytes:        d("queue_bytes", "Bytes in the queue."),
		paused:            d("capture_paused", "1 while capture is paused by backpressure."),
		clients:           d("websocket_clients", "Live view stream clients."),
		tableVersion:      d("delta_table_version", "Latest local version of a Delta table.", "table", "kind"),
		remoteVersion:     d("replica_remote_version", "Latest version of a table on the replica.", "table"),
		backlogBytes:      d("replica_backlog_bytes", "Bytes committed locally and not yet replicated."),
		backlogVersions:   d("replica_backlog_versions", "Versions committed locally and not yet replicated."),
		requests:          d("replica_requests_total", "Requests sent to the replica."),
		uploadErrors:      d("replica_errors_total", "Requests to the replica that failed."),
		uploadStalls:      d("replica_stalls_total", "Requests to the replica cancelled because nothing of them moved for a while, or too slowly."),
		versions:          d("replica_versions_total", "Delta versions replicated."),
		uploadedBytes:     d("replica_bytes_total", "Bytes replicated."),
		online:            d("replica_online", "1 while the replica is reachable."),
		capturedTxns:      d("captured_transactions_total", "Committed transactions captured into the queue."),
		receivedChanges:   d("captured_changes_total", "Row changes received from PostgreSQL (snapshot rows included)."),
		ignored:           d("ignored_changes_total", "Row changes of tables in the publication but not in source.tables, passed over."),
		deltaCommits:      d("delta_commits_total", "Delta commits written.", "table", "kind"),
		deltaFilesAdded:   d("delta_files_added_total", "Data files added by Delta commits.", "table", "kind"),
		deltaFilesRemoved: d("delta_files_removed_total", "Data files removed (rewritten or deleted) by Delta commits.", "table", "kind"),
		vacuumRuns:        d("vacuum_runs_total", "Vacuums of the Delta tables (dry runs aside)."),
		vacuumFailures:    d("vacuum_failures_total", "Vacuums that failed for at least one table."),
		vacuumFiles:       d("vacuum_deleted_files_total", "Files deleted locally by vacuums: data files, log files (commits and checkpoints) past the log retention, and data files pruned (kept on the replica, delta.local_retention).", "kind"),
		vacuumBytes:       d("vacuum_deleted_bytes_total", "Bytes of the files deleted locally by vacuums."),
		vacuumLast:        d("vacuum_last_success_timestamp_seconds", "When a vacuum last succeeded for every table (Unix time); absent before the first."),
		applyFailing:      d("apply_failing", "1 while the applier cannot apply a table, or the queue at all: its changes stay queued."),
		applyTableFailing: d("apply_table_failing_since_timestamp_seconds", "When a source table that cannot be applied began failing (Unix time); absent while it applies.", "table"),
		replaced:          d("replaced_values_total", "Values a changelog stored other than PostgreSQL holds them (listed in the row's _replaced).", "table"),
		backfillRows:      d("backfill_rows_total", "Rows a backfill of a table (added after the first start, or resynced) has queued.", "table"),
		backfillChunks:    d("backfill_chunks_total", "Chunks a backfill of a table has queued.", "table"),
		backfillRunning:   d("backfill_running", "1 while a table's existing rows are being copied, 0 once copied or while waiting for its turn.", "table"),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.up != nil {
		if g := backlogBudget(a.cfg.Replica.MaxBacklog); g != nil {
			reg.MustRegister(g)
		}
	}
	return reg
}

// backlogBudget returns the gauge of replica.max_backlog, the replication
// backlog at which capture pauses (Agent.backpressure), so that an alert can
// compare lakeside_replica_backlog_bytes with it before capture pauses; nil
// when capture has no budget (max_backlog 0). The value is fixed: the key
// changes with a restart only.
func backlogBudget(maxBacklog int64) prometheus.Collector {
	if maxBacklog <= 0 {
		return nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lakeside_replica_max_backlog_bytes",
		Help: "replica.max_backlog: the replication backlog at which capture pauses; absent without a budget.",
	})
	g.Set(float64(maxBacklog))
	return g
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.confirmed, c.checkpoint, c.lag, c.lagSeconds, c.queueTxns, c.queueBytes, c.paused,
		c.clients, c.tableVersion, c.remoteVersion, c.backlogBytes, c.backlogVersions, c.requests, c.versions, c.uploadedBytes, c.online,
		c.capturedTxns, c.receivedChanges, c.ignored, c.deltaCommits, c.deltaFilesAdded, c.deltaFilesRemoved, c.uploadErrors, c.uploadStalls,
		c.vacuumRuns, c.vacuumFailures, c.vacuumFiles, c.vacuumBytes, c.vacuumLast, c.applyFailing, c.applyTableFailing, c.replaced,
		c.backfillRows, c.backfillChunks, c.backfillRunning} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.a.Status()
	if err != nil {
		return
	}
	src := c.a.src.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	v := c.a.vacuumed.counts()
	counter(c.vacuumRuns, float64(v.runs))
	counter(c.vacuumFailures, float64(v.failures))
	counter(c.vacuumFiles, float64(v.files), "data")
	counter(c.vacuumFiles, float64(v.logFiles), "log")
	counter(c.vacuumFiles, float64(v.pruned), "pruned")
	counter(c.vacuumBytes, float64(v.bytes))
	if !v.lastSuccess.IsZero() {
		gauge(c.vacuumLast, float64(v.lastSuccess.UnixNano())/1e9)
	}
	failing := 0.0
	for _, f := range st.ApplyFailures {
		failing = 1
		if f.Table != "" {
			gauge(c.applyTableFailing, float64(f.Since.UnixNano())/1e9, f.Table)
		}
	}
	gauge(c.applyFailing, failing)
	for table, n := range c.a.app.Replaced() {
		counter(c.replaced, float64(n), table)
	}
	for _, b := range st.Backfills {
		counter(c.backfillRows, float64(b.RowsCopied), b.Table)
		counter(c.backfillChunks, float64(b.Chunks), b.Table)
		running := 0.0
		if b.State == BackfillRunning {
			running = 1
		}
		gauge(c.backfillRunning, running, b.Table)
	}
	counter(c.capturedTxns, float64(src.Transactions))
	counter(c.receivedChanges, float64(src.Changes))
	counter(c.ignored, float64(src.IgnoredChanges))
	for _, t := range c.a.app.Tables() {
		counter(c.deltaCommits, float64(t.Commits), t.Name, t.Kind)
		counter(c.deltaFilesAdded, float64(t.FilesAdded), t.Name, t.Kind)
		counter(c.deltaFilesRemoved, float64(t.FilesRemoved), t.Name, t.Kind)
	}
	gauge(c.confirmed, float64(src.ConfirmedLSN))
	gauge(c.checkpoint, float64(src.DurableLSN))
	gauge(c.lag, float64(st.LagBytes))
	gauge(c.lagSeconds, st.LagSeconds)
	gauge(c.queueTxns, float64(st.Queue.Entries))
	gauge(c.queueBytes, float64(st.Queue.Bytes))
	paused := 0.0
	if st.State == "paused" {
		paused = 1
	}
	gauge(c.paused, paused)
	gauge(c.clients, float64(st.LiveClients))
	for _, t := range st.Tables {
		gauge(c.tableVersion, float64(t.Version), t.Name, t.Kind)
		if t.RemoteVersion != nil {
			gauge(c.remoteVersion, float64(*t.RemoteVersion), t.Name)
		}
	}
	if u := st.Upload; u != nil {
		gauge(c.backlogBytes, float64(u.BacklogBytes))
		gauge(c.backlogVersions, float64(u.BacklogVersions))
		counter(c.requests, float64(u.Requests))
		counter(c.uploadErrors, float64(u.Errors))
		counter(c.uploadStalls, float64(u.Stalls))
		counter(c.versions, float64(u.Versions))
		counter(c.uploadedBytes, float64(u.BytesUploaded))
		online := 0.0
		if u.Online {
			online = 1
		}
		gauge(c.online, online)
	}
}
