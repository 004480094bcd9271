// Package a2a speaks the Agent2Agent protocol, specification v0.3.0, over
// its JSON-RPC 2.0 binding, as the official JavaScript client (npm
// @a2a-js/sdk 1.3.0, its v0.3 compatibility transport) reads and writes
// it. It is a translation and nothing more: no routing, no authentication,
// no tenancy; server/ serves it at /a2a/{agent}.
//
// The protocol's own types are those of the A2A project's Go module
// (github.com/a2aproject/a2a-go/a2a, v0.3.3): [a2a.Message], [a2a.Task],
// [a2a.TaskStatusUpdateEvent], [a2a.TaskArtifactUpdateEvent],
// [a2a.AgentCard]. This package adds what that module keeps internal or
// leaves to its in-memory server: the JSON-RPC envelope ([Request],
// [Response], [Error] and the error codes), the strict reading of each
// method's params ([DecodeSend], [DecodeTaskQuery], [DecodeTaskID]), and
// the mapping onto the host:
//
//   - a task is a run: its id is the run's id; its contextId is the
//     session's id;
//   - a user message's text, file and data parts are the run's input
//     ([ContentOf]); a data part {"approval_id", "approve", "reason"}
//     decides an approval request the task waits on ([Decision]), with
//     "input" an edit, with "response" instead of "approve" an answer in
//     the tool's place;
//   - a task's state is the run's ([StateOf]): running → working,
//     approval_required → input-required (the status message names each
//     pending call and how to decide it), completed → completed,
//     cancelled → canceled, failed and timed_out → failed (the reason in
//     the status message), interrupted → unknown;
//   - each model pass's text is an artifact (its id the response item's
//     id), appended as it streams ([Stream]).
//
// [TaskOf] builds a task from a session's transcript and status; a
// [Stream] turns a run's progress and snapshots (host.Update) into the
// events of message/stream and tasks/resubscribe, never sending a
// character twice, and ends with a status-update whose final is true.
//
// testdata/ holds golden JSON of each answer and stream, and
// testdata/a2a-client the official client the server's tests drive.
package a2a
