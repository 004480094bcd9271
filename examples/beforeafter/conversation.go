// Package beforeafter holds what the two programs of the "before and
// after" demo share: the conversation they hold and the flaky, offline
// model they hold it with. byhand/ writes the plumbing itself (retries,
// persistence, resume); onhost/ runs the same workflow on the host.
package beforeafter

import "github.com/agentichost/agentic/internal/fakemodel"

// Conversation is what the user says, one message after the other.
var Conversation = []string{
	"What is an append-only ledger?",
	"And what does a lease add?",
	"Thanks, that is all.",
}

// FlakyModel starts the fake model, offline, failing two requests in five
// (500, 502, 503), always the same ones.
func FlakyModel() (*fakemodel.Server, error) {
	return fakemodel.Start(fakemodel.Options{FaultRate: 0.4, Seed: 7,
		FaultKinds: []fakemodel.FaultKind{fakemodel.FaultServerError, fakemodel.FaultBadGateway, fakemodel.FaultNoProvider}})
}
