// Package ledger is the vocabulary every layer of agentic-host shares: the
// events of a session's append-only ledger ([Event] and its kinds), their
// versioned, binary-safe codec ([Encode], [Decode], [Upgrade]), and what is
// read off a ledger: the transcript ([ProjectSession]), a run's state
// ([ProjectRun]), what the model sees again ([ReplayMessages]), usage and
// billed cost ([UsageOf]), approvals ([Approvals], [PendingApprovals]) and
// lookups ([MessageOfRequest], [RunOfMessage], [RunInputs]).
//
// It sits below everything that uses it: the storage contract and its
// adapters keep its events, the host appends and replays them, the server
// and the protocol packages translate them to the wire. It imports none of
// them and nothing outside the standard library.
package ledger
