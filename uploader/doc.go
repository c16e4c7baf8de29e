// Package uploader replicates the local Delta tables of an agent to S3,
// MinIO or a directory, so that the remote is always a valid Delta table.
//
// For every table, versions go up in order. For version N the uploader first
// uploads every data file its add actions name and its checkpoint (if any),
// then _delta_log/N.json with a conditional put (If-None-Match: *), and
// _last_checkpoint only once the checkpoint it names and its commit are on the
// remote. A reader of the remote therefore never sees a commit whose files
// are missing. When the remote already holds a different N.json (two agents
// configured onto one prefix), replication of that table stops with
// ErrRemoteConflict; the remote table stays intact.
//
// What is confirmed on the remote is recorded in the agent's bbolt state file
// (see store.UploadState), so steady state needs no LIST request, a restart
// uploads nothing confirmed twice and skips nothing, and multipart uploads of
// large files resume from their last completed part. An object put that
// succeeded but was not recorded before a crash is detected by its
// conditional put failing; the uploader then compares the remote bytes with
// the local file.
//
// Versions go up as a pipeline: workers upload the files of up to Window
// versions ahead while the commits go up one at a time, each as soon as the
// files of its version are confirmed.
//
// Vacuum deletes on the remote only what a local vacuum deleted, and only
// once the remote has the versions that no longer need the file: the local
// vacuum keeps every file of a version not yet on the remote
// (Uploader.VacuumOptions), records the files it deletes in the state file
// before deleting them, and each pass deletes on the remote those whose local
// file is gone and whose version bound the remote has passed (DeleteRemote).
// Old log files expired locally go the same way, once the remote has the
// checkpoint its log then starts from and its _last_checkpoint names it. A
// remote delete is recorded once done and never repeated.
//
// An unreachable remote is normal: the uploader backs off up to a cap, logs
// once when it goes offline and once when it comes back, and keeps the
// backlog (versions and bytes per table) available through Backlog so the
// agent can apply backpressure.
//
// Backends implement ReplicaClient (and MultipartClient for resumable large
// uploads): package uploader/s3 for S3 and MinIO, uploader/file for a
// directory, and uploader/replica opens the right one from a Config.
package uploader
