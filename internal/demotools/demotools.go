// Package demotools holds the Go tools of the offline demo: small,
// deterministic stand-ins for a real integration.
package demotools

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"

	"github.com/agentichost/agentic/host"
)

// GetAccount returns the get_account tool: it looks up a (made-up) customer
// account by id. It only reads.
func GetAccount() host.Tool {
	return host.NewTool(host.ToolSpec{
		Name:        "get_account",
		Description: "Look up a customer account by its id: owner, plan and balance.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"account_id":{"type":"string","description":"The account id, e.g. \"42\"."}},"required":["account_id"],"additionalProperties":false}`),
		Effect:      host.EffectRead,
		Idempotent:  true,
	}, getAccount)
}

type account struct {
	AccountID  string  `json:"account_id"`
	Owner      string  `json:"owner"`
	Plan       string  `json:"plan"`
	BalanceUSD float64 `json:"balance_usd"`
}

func getAccount(_ context.Context, call host.ToolCall) (host.ToolResult, error) {
	var in struct {
		AccountID string `json:"account_id"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return host.ToolResult{}, err
	}
	if in.AccountID == "" {
		return host.ToolResult{}, errors.New("account_id is required")
	}
	h := fnv.New32a()
	h.Write([]byte(in.AccountID))
	n := h.Sum32()
	owners := []string{"Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson"}
	plans := []string{"free", "pro", "team"}
	out, err := json.Marshal(account{
		AccountID:  in.AccountID,
		Owner:      owners[n%uint32(len(owners))],
		Plan:       plans[(n/7)%uint32(len(plans))],
		BalanceUSD: float64(n%100000) / 100,
	})
	return host.ToolResult{Output: string(out), Source: "go:demotools.get_account"}, err
}
