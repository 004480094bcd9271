// Package file is a [storage.Storage] that keeps each session's ledger in a
// JSON Lines file: the embedded default, zero setup. It implements
// [storage.Lister], [storage.Closer], [storage.Deleter], [storage.KV],
// [storage.NamespaceLister], [storage.Snapshotter] and [storage.Blobs]
// (with [storage.BlobScoper]).
//
// # Layout
//
// A [Store] owns one directory. The events of session id are in
// <dir>/<id>.jsonl; ids are checked with [storage.ValidSessionID], so they
// are safe file names. [Open] creates the directory (mode 0700) when it is
// missing; session files are created with mode 0600 by the first Append of
// the session. A session's snapshot, when the host keeps one, is
// <dir>/<id>.snap (see [Store.PutSnapshot]). Files with other names are
// ignored.
//
// # Framing
//
// Each line of a file is one record, and one record holds what one Append
// call appended:
//
//   - one event: its ledger encoding, {"v":1,"id":…} (see [ledger.Encode]);
//   - n > 1 events: a JSON array of their encodings, in order,
//     [{"v":1,"id":…},{"v":1,"id":…}].
//
// A record counts once its terminating newline is in the file. So every
// line is valid JSON holding ledger events (a file reads with standard
// tools: jq -c 'if type == "array" then .[] else . end' lists its events),
// and a batch is atomic on load by construction: a batch is one line, and a
// line is all there or torn. The ledger codec never puts a newline inside an
// event (strings escape it, raw JSON is compacted); Append checks that
// anyway. A marker field would not do: [ledger.Decode] refuses unknown
// fields, and a trailer line would not be an event.
//
// # Appending
//
// Append encodes the whole batch first (an event the codec refuses fails
// the call, and nothing is written), then writes the record with a single
// write(2) on the session's file, opened O_APPEND and kept open for the
// next Appends (at most [Options.MaxOpenFiles] files at once, the least
// recently appended closed first); with [Options.Fsync] it then fsyncs the
// file. When the write or the fsync
// fails, Append truncates the file back to its last committed record, so
// that a failed Append leaves nothing visible and may be retried. Should
// that truncation fail too, the session refuses every later Append of this
// Store with an error saying so; a new Store recovers the file as after a
// crash (below), except that when the write had succeeded and only the
// fsync failed, the failed batch may then be found, whole.
//
// When the process is out of file descriptors (EMFILE, or ENFILE for the
// system), an Append or a Load closes the files the Store keeps open, then
// waits for a descriptor to come free, for up to 5 s or until its context
// ends, rather than fail at once: a burst of connections should slow a
// run's append, not interrupt the run. It then fails with the shortage's
// error, which the server answers with 503 and Retry-After.
//
// Appends to different sessions run in parallel; appends to one session
// are serialised by the Store (the host already does one at a time).
//
// # Recovery after a crash
//
// Load decodes a file's records in order. What a crash in the middle of an
// Append leaves is a torn tail: a last line without its newline, or last
// lines that do not decode (a partly persisted write after a power loss).
// Precisely, the torn tail is everything from the first record that does
// not decode to the end of the file, provided that no complete line after
// it decodes. Load drops it, whole (so a torn batch is dropped whole), and
// logs a warning with the session, the file and the byte offset: never an
// error. The next Append of the session first truncates the file to its
// last good record, so that new records never follow garbage.
//
// A record that does not decode followed by one that does is not a torn
// write but damage in the middle of the file: skipping it would silently
// drop events. Nor is a whole line of events of another schema version
// (written by a newer build, or by an older one and not migrated): it is
// never dropped as torn. Load and Append of that session fail with a [*CorruptError]
// naming the file and the line, which wraps the codec's [*ledger.DecodeError]
// and matches [ErrCorrupt]; ListSessions still lists the session, so that
// the host finds and reports it. Repairing the file is an operator's
// decision.
//
// # Durability
//
// With Fsync off (the default), when Append returns nil the record has
// been handed to the kernel: it survives a crash of the process, and is
// visible to every Load of this or another Store on the directory. It is
// not necessarily on stable storage: after a crash of the kernel or a power
// loss, the records written since the kernel last flushed the file may be
// lost, and the file may end in a torn tail (dropped on load, as above) or,
// on some file systems, hold a damaged record followed by intact ones
// (reported as a [*CorruptError]).
//
// With Fsync on, when Append returns nil the record is on stable storage
// (fsync(2) of the file), and so is the file's directory entry (the first
// Append of each session in the life of a Store also fsyncs the directory,
// and Open fsyncs the parent of each directory it creates). It survives a
// power loss, to the degree that the disk honours flushes. A crash can then damage only the record of an Append that had
// not returned, which recovery drops.
//
// Either way a batch is visible whole or not at all, and records are never
// reordered.
//
// # Values (storage.KV)
//
// The key-value store lives in <dir>/kv/: one directory per namespace and
// one file per key, each named by the SHA-256 of the namespace or key in
// hex (any bytes make a short, safe name). A value file holds a magic
// ("AGKV" and a version byte), the namespace and the key (each after its
// length as a uvarint: a Get checks them), the value, and a CRC-32C of all
// that; a file that fails these checks makes Get fail with
// [ErrCorruptValue] rather than return damaged bytes. Set writes a new file
// (".set-*") and renames it over the old one, so that a Get, even after a
// crash, sees the old value or the new one whole; with [Options.Fsync] the
// file and its directory are fsynced, as an Append's are. A crash between
// the write and the rename leaves a ".set-*" file, which Get ignores and
// an Open removes once it is a minute old (a younger one may be a Set of
// another process in progress).
//
// # Blobs (storage.Blobs)
//
// Blobs live in <dir>/blobs/: the store's own in that directory, and those
// of each scope (each tenant's [storage.Prefix] view) in a subdirectory,
// <dir>/blobs/@<scope> (or @~ and the scope's SHA-256 in hex, for a scope
// that is not a safe file name). A blob is one file named by the hex digits
// of its digest, holding its bytes as they are (a file reads with any tool,
// and sha256sum checks it); its modification time is the blob's Stored
// time. PutBlob writes a new file (".put-*"), sets its time and renames it
// to its name, so that a GetBlob, even after a crash, finds the blob whole
// or not at all; with [Options.Fsync] the file and its directory are
// fsynced. Bytes already stored are not written again: their file's time
// moves to now. GetBlob checks the bytes against the digest, and fails with
// [ErrCorruptBlob] rather than return damaged bytes. An Open removes the
// ".put-*" files of interrupted puts once they are a minute old.
//
// # One Store per directory
//
// A Store keeps per-session state (the open file and the size of its
// committed records) and assumes that nothing else writes its files while
// it is open. Two Stores writing one directory, in one process or in
// several, can lose records: the package does not lock the directory.
// Reading the files (a second Store that only loads, a backup) is safe.
package file
