package ledger

// SessionUsage is what a session's model calls consumed and cost, from its
// ledger (see [UsageOf]).
type SessionUsage struct {
	// Total sums the provider-reported usage of every model call of the
	// session. Its IsBYOK is nil: it mixes calls.
	Total Usage `json:"total"`
	// Cost sums the billed cost of every call, in USD: each call's
	// [Usage.Billed], so that the upstream cost of a call billed to
	// the user's own key counts, and that of a call paid with credits is
	// never counted twice.
	Cost float64 `json:"cost"`
	// Fuel sums the fuel of the session's metered plugin calls (Wasm
	// plugins): its tool calls, its tasks' validators and the policies
	// that decided on its calls — the CPU its plugins used, in their fuel
	// units.
	Fuel int64 `json:"fuel,omitempty"`
	// Runs are the session's runs, in the order they started.
	Runs []RunUsage `json:"runs"`
}

// RunUsage is what one run's model calls consumed and cost.
type RunUsage struct {
	// RunID is the run's id.
	RunID string `json:"run_id"`
	// Usage sums the usage of the run's model calls: its passes and the
	// compactions it made.
	Usage Usage `json:"usage"`
	// Cost sums their billed cost, in USD.
	Cost float64 `json:"cost"`
	// Steps is the number of the run's model passes (compactions not
	// counted).
	Steps int `json:"steps"`
	// Fuel sums the fuel of the run's metered plugin calls.
	Fuel int64 `json:"fuel,omitempty"`
}

// UsageOf computes a session's usage and billed cost from its events, per
// run and in total: every model pass (step event) and every compaction
// counts, each billed by [Usage.Billed]. Events of no run (a compaction
// without a run id) count in the total only. The events a fork copied from
// its source (see [Fork]) were the source's calls: they count there, not
// again in the fork. It is a pure function of the events.
func UsageOf(events []Event) SessionUsage {
	var su SessionUsage
	index := map[string]int{}
	run := func(id string) *RunUsage {
		if id == "" {
			return nil
		}
		i, ok := index[id]
		if !ok {
			i = len(su.Runs)
			index[id] = i
			su.Runs = append(su.Runs, RunUsage{RunID: id})
		}
		return &su.Runs[i]
	}
	copied := 0 // events still to skip: a fork's copies of its source's
	for _, e := range events {
		if e.Fork != nil {
			copied = e.Fork.Copied
			continue
		}
		if copied > 0 {
			copied--
			continue
		}
		if fuel := e.PluginFuel(); fuel > 0 {
			su.Fuel += fuel
			if r := run(e.RunID); r != nil {
				r.Fuel += fuel
			}
			continue
		}
		u, step, ok := e.ModelUsage()
		if !ok {
			if e.RunStart != nil {
				run(e.RunID) // a run with no pass still shows
			}
			continue
		}
		billed := u.Billed()
		su.Total = su.Total.Add(u)
		su.Cost += billed
		if r := run(e.RunID); r != nil {
			r.Usage = r.Usage.Add(u)
			r.Cost += billed
			if step {
				r.Steps++
			}
		}
	}
	if su.Runs == nil {
		su.Runs = []RunUsage{}
	}
	return su
}

// PluginFuel is the plugin fuel event e records: a tool call's (a
// submission's is its validator's), with its policies', or the policies'
// that asked for an approval; 0 for the events of every other kind.
func (e Event) PluginFuel() int64 {
	switch {
	case e.ToolResult != nil:
		return max(e.ToolResult.Fuel, 0) + max(e.ToolResult.PolicyFuel, 0)
	case e.ApprovalRequest != nil:
		return max(e.ApprovalRequest.PolicyFuel, 0)
	}
	return 0
}

// ModelUsage returns the provider-reported usage of the model call e
// records — a model pass (step is true) or a compaction; ok is false for
// the events of every other kind, which cost nothing.
func (e Event) ModelUsage() (u Usage, step, ok bool) {
	switch {
	case e.Step != nil:
		return e.Step.Usage, true, true
	case e.Compaction != nil:
		return e.Compaction.Usage, false, true
	}
	return Usage{}, false, false
}
