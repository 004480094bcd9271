package ledger

import "slices"

// Feature names a part of the event schema that a build of agentic-host
// may not read: an event kind or field added after the first release. Hosts
// sharing a store announce the features they read, and a host writes an
// event that uses a feature only while every live host announces it, so
// that a rolling deploy (and its rollback) never leaves a session to a host
// that cannot read it. The names are stable: they travel between builds.
//
// Everything of schema version 1 outside these features every build reads.
type Feature string

// The features of this build's schema. Each names what an event that uses
// it carries; [Event.Features] tells them.
const (
	// FeatureFork: a fork record (KindFork).
	FeatureFork Feature = "fork"
	// FeatureBlob: parts and tool outputs kept by reference to a blob
	// (Part.Blob, ToolResult.OutputBlob).
	FeatureBlob Feature = "blob"
	// FeatureTask: the runs of tasks (RunStart.Task, RunEnd.Deliverable).
	FeatureTask Feature = "task"
	// FeatureJournal: what a durable plugin call did (KindToolJournal).
	FeatureJournal Feature = "journal"
	// FeatureWait: a durable plugin call that waits for an event or a
	// time (journal entries JournalWaitEvent, JournalWaitTimer and
	// JournalWaitDone).
	FeatureWait Feature = "wait"
	// FeatureDecisionEdit: a person's edit of a call's input or answer in
	// the tool's place (DecisionEdit, DecisionRespond, and
	// ApprovalDecision.Input, InputDigest and Response).
	FeatureDecisionEdit Feature = "decision-edit"
	// FeatureOverlap: a message that interrupts or rolls back the run in
	// flight (Input.Overlap, RunEnd.RolledBack).
	FeatureOverlap Feature = "overlap"
)

// features lists this build's features in a fixed order.
var features = []Feature{FeatureFork, FeatureBlob, FeatureTask, FeatureJournal, FeatureWait, FeatureDecisionEdit, FeatureOverlap}

// Features returns every feature this build reads and writes, in a fixed
// order: what its host announces by default.
func Features() []Feature { return slices.Clone(features) }

// KnownFeature reports whether f is one of this build's features.
func KnownFeature(f Feature) bool { return slices.Contains(features, f) }

// Features returns the features the event uses, in the order of
// [Features]; nil for an event every build reads.
func (e *Event) Features() []Feature {
	var out []Feature
	if e.Kind == KindFork {
		out = append(out, FeatureFork)
	}
	if e.usesBlobs() {
		out = append(out, FeatureBlob)
	}
	if (e.RunStart != nil && e.RunStart.Task != nil) || (e.RunEnd != nil && len(e.RunEnd.Deliverable) > 0) {
		out = append(out, FeatureTask)
	}
	if j := e.ToolJournal; j != nil {
		out = append(out, FeatureJournal)
		if slices.ContainsFunc(j.Entries, func(en JournalEntry) bool {
			return en.Op == JournalWaitEvent || en.Op == JournalWaitTimer || en.Op == JournalWaitDone
		}) {
			out = append(out, FeatureWait)
		}
	}
	if d := e.ApprovalDecision; d != nil && (d.Decision == DecisionEdit || d.Decision == DecisionRespond ||
		len(d.Input) > 0 || d.InputDigest != "" || d.Response != "") {
		out = append(out, FeatureDecisionEdit)
	}
	if (e.Input != nil && e.Input.Overlap != "") || (e.RunEnd != nil && e.RunEnd.RolledBack) {
		out = append(out, FeatureOverlap)
	}
	return out
}

// usesBlobs reports whether the event keeps bytes by reference.
func (e *Event) usesBlobs() bool {
	if in := e.Input; in != nil {
		for i := range in.Parts {
			if in.Parts[i].Blob != "" {
				return true
			}
		}
	}
	return e.ToolResult != nil && e.ToolResult.OutputBlob != ""
}

// MissingFeatures returns the features the events use that reads does not
// hold, each once, in the order of [Features]; nil when reads holds them
// all.
func MissingFeatures(reads []Feature, events ...Event) []Feature {
	var missing []Feature
	for i := range events {
		for _, f := range events[i].Features() {
			if !slices.Contains(reads, f) && !slices.Contains(missing, f) {
				missing = append(missing, f)
			}
		}
	}
	slices.SortFunc(missing, func(a, b Feature) int { return slices.Index(features, a) - slices.Index(features, b) })
	return missing
}
