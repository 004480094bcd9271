// Command get_account is an example plugin: a read-only tool that looks up
// a (made-up) customer account by id, deterministically, like the offline
// demo's Go tool of the same name.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o get_account.wasm .
package main

import (
	"errors"
	"hash/fnv"

	"github.com/agentichost/agentic/pdk"
)

type input struct {
	AccountID string `json:"account_id"`
}

type account struct {
	AccountID  string  `json:"account_id"`
	Owner      string  `json:"owner"`
	Plan       string  `json:"plan"`
	BalanceUSD float64 `json:"balance_usd"`
}

func init() {
	pdk.RegisterTool(pdk.Tool{
		Name:        "get_account",
		Description: "Look up a customer account by its id: owner, plan and balance.",
		InputSchema: `{"type":"object","properties":{"account_id":{"type":"string","minLength":1,"description":"The account id, e.g. \"42\"."}},"required":["account_id"],"additionalProperties":false}`,
		Effect:      pdk.Read,
		Idempotent:  true,
	}, getAccount)
}

func getAccount(c pdk.Call, in input) (account, error) {
	if in.AccountID == "" {
		return account{}, errors.New("account_id is required")
	}
	pdk.Logf(pdk.LogDebug, "looking up account %s", in.AccountID)
	h := fnv.New32a()
	h.Write([]byte(in.AccountID))
	n := h.Sum32()
	owners := []string{"Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson"}
	plans := []string{"free", "pro", "team"}
	return account{
		AccountID:  in.AccountID,
		Owner:      owners[n%uint32(len(owners))],
		Plan:       plans[(n/7)%uint32(len(plans))],
		BalanceUSD: float64(n%100000) / 100,
	}, nil
}

func main() {}
