package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// Held plugin versions of a running serve: "plugin held" lists them (what
// each widens), "plugin approve NAME HASH" loads one in the place of the
// version serving, "plugin discard NAME HASH" drops it — through the
// server's API (POST /v1/plugins/{name}/versions/{hash}), as the tenant
// whose key they present.

// serveClient is the flags that reach a running serve.
type serveClient struct {
	url, keyEnv string
}

func (c *serveClient) register(fs *flag.FlagSet, env Env) {
	def := env.Getenv("AGENTIC_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	fs.StringVar(&c.url, "server", def, "the serve `URL` ($AGENTIC_SERVER, else http://127.0.0.1:8080)")
	fs.StringVar(&c.keyEnv, "key-env", "AGENTIC_API_KEY", "the environment `VARIABLE` holding the tenant's API key")
}

// serveCommand starts a command that talks to a running serve: its flags
// (--server, --key-env, and what flags adds), its usage ("Usage:
// agentic-host NAME [flags] ARGS", then about), and its arguments, from
// min to max of them (max -1: any number).
func serveCommand(name, argsUsage, about string, args []string, env Env, min, max int, flags func(*flag.FlagSet)) (*serveClient, []string, error) {
	fs := newFlags(name, env)
	c := &serveClient{}
	c.register(fs, env)
	if flags != nil {
		flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host %s [flags] %s\n\n%s\n\nFlags:\n", name, argsUsage, about)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if len(pos) < min || max >= 0 && len(pos) > max {
		fs.Usage()
		if argsUsage == "" {
			return nil, nil, fail(2, "%s takes no arguments", name)
		}
		return nil, nil, fail(2, "want %s", argsUsage)
	}
	return c, pos, nil
}

// do sends one request — body as JSON, or a []byte as a module's bytes —
// and decodes a 2xx answer into out; anything else is an error with the
// server's message.
func (c *serveClient) do(ctx context.Context, env Env, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	contentType := ""
	switch b := body.(type) {
	case nil:
	case []byte: // a module's bytes
		rd, contentType = bytes.NewReader(b), "application/wasm"
	default:
		j, _ := json.Marshal(body)
		rd, contentType = bytes.NewReader(j), "application/json"
	}
	return c.send(ctx, env, method, path, contentType, rd, out)
}

// heldVersion is a held version as GET /v1/plugins lists it.
type heldVersion struct {
	Name      string `json:"name"`
	Hash      string `json:"hash"`
	Previous  string `json:"previous"`
	Widenings []struct {
		Kind   string `json:"kind"`
		Name   string `json:"name"`
		Change string `json:"change"`
		Old    string `json:"old,omitempty"`
		New    string `json:"new,omitempty"`
	} `json:"widenings"`
	Since time.Time `json:"since"`
}

func pluginHeldCmd(ctx context.Context, args []string, env Env) error {
	var asJSON *bool
	c, _, err := serveCommand("plugin held", "", "List the plugin versions a running serve holds for the tenant because\n"+
		"they widen what the version serving offers, with each widening.\n"+
		"Decide one with agentic-host plugin approve|discard NAME HASH.", args, env, 0, 0,
		func(fs *flag.FlagSet) { asJSON = fs.Bool("json", false, "print JSON instead of a table") })
	if err != nil {
		return err
	}
	var list struct {
		Held []heldVersion `json:"held"`
	}
	if _, err := c.do(ctx, env, "GET", "/v1/plugins", nil, &list); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list.Held)
	}
	if len(list.Held) == 0 {
		fmt.Fprintln(env.Stdout, "no plugin versions held")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tHELD\tSERVING\tWIDENS")
	for _, v := range list.Held {
		ws := make([]string, len(v.Widenings))
		for i, w := range v.Widenings {
			ws[i] = w.Kind + " " + w.Name + ": " + w.Change
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.Hash, v.Previous, strings.Join(ws, "; "))
	}
	return tw.Flush()
}

// pluginDecideCmd is "plugin approve" (approve true) and "plugin discard".
func pluginDecideCmd(ctx context.Context, args []string, env Env, approve bool) error {
	verb := map[bool]string{true: "approve", false: "discard"}[approve]
	what := "Load the held version HASH of plugin NAME in the place of the version\nserving"
	if !approve {
		what = "Drop the held version HASH of plugin NAME; the version serving goes on"
	}
	c, pos, err := serveCommand("plugin "+verb, "NAME HASH", what+"\n(see agentic-host plugin held).", args, env, 2, 2, nil)
	if err != nil {
		return err
	}
	name, hash := pos[0], pos[1]
	var info struct {
		Name string `json:"name"`
		Hash string `json:"hash"`
	}
	if _, err := c.do(ctx, env, "POST", "/v1/plugins/"+url.PathEscape(name)+"/versions/"+url.PathEscape(hash), map[string]bool{"approve": approve}, &info); err != nil {
		return err
	}
	if approve {
		fmt.Fprintf(env.Stdout, "loaded %s %s\n", info.Name, info.Hash)
	} else {
		fmt.Fprintf(env.Stdout, "discarded %s %s\n", name, hash)
	}
	return nil
}

// pluginReleaseCmd is "plugin release NAME": a quarantined plugin of a
// running serve serves again (POST /v1/plugins/{name}/release).
func pluginReleaseCmd(ctx context.Context, args []string, env Env) error {
	c, pos, err := serveCommand("plugin release", "NAME", "Let plugin NAME, quarantined by a running serve because it failed too\n"+
		"often, serve again, its failures forgotten (on the host that takes the\n"+
		"request).", args, env, 1, 1, nil)
	if err != nil {
		return err
	}
	if _, err := c.do(ctx, env, "POST", "/v1/plugins/"+url.PathEscape(pos[0])+"/release", nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "released %s\n", pos[0])
	return nil
}

// auditEntry is an entry of GET /v1/audit.
type auditEntry struct {
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Action   string    `json:"action"`
	Plugin   string    `json:"plugin"`
	Hash     string    `json:"hash,omitempty"`
	Previous string    `json:"previous,omitempty"`
	By       string    `json:"by"`
	Host     string    `json:"host"`
	Detail   string    `json:"detail,omitempty"`
}

// pluginAuditCmd is "plugin audit [NAME]": a running serve's audit log of
// the tenant's plugins (GET /v1/audit).
func pluginAuditCmd(ctx context.Context, args []string, env Env) error {
	var asJSON *bool
	var limit *int
	c, pos, err := serveCommand("plugin audit", "[NAME]", "Print the tenant's audit log of its plugins (of plugin NAME alone if\n"+
		"given), oldest first: each version loaded, replaced, held, approved,\n"+
		"discarded, refused, removed, quarantined, released or rolled back, each\n"+
		"canary started, promoted or rolled back, by whom.", args, env, 0, 1, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print JSON instead of a table")
		limit = fs.Int("n", 100, "the last `N` entries (1 to 1000)")
	})
	if err != nil {
		return err
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	if len(pos) == 1 {
		q.Set("plugin", pos[0])
	}
	var log struct {
		Entries []auditEntry `json:"entries"`
	}
	if _, err := c.do(ctx, env, "GET", "/v1/audit?"+q.Encode(), nil, &log); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(log.Entries)
	}
	if len(log.Entries) == 0 {
		fmt.Fprintln(env.Stdout, "no entries")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tPLUGIN\tHASH\tBY\tHOST\tDETAIL")
	for _, e := range log.Entries {
		hash := e.Hash
		if len(hash) > len("sha256:")+12 {
			hash = hash[:len("sha256:")+12]
		}
		detail := e.Detail
		if len(detail) > 120 {
			detail = detail[:120] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.RFC3339), e.Action, e.Plugin, hash, e.By, e.Host, detail)
	}
	return tw.Flush()
}

// pluginRollbackCmd is "plugin rollback NAME [HASH]": a running serve
// loads a version the plugin replaced again (POST
// /v1/plugins/{name}/rollback).
func pluginRollbackCmd(ctx context.Context, args []string, env Env) error {
	c, pos, err := serveCommand("plugin rollback", "NAME [HASH]", "Load again a version plugin NAME replaced (HASH, else the newest kept) in\n"+
		"the place of the version serving; calls in flight finish on theirs.\n"+
		"agentic-host plugin versions NAME lists them.", args, env, 1, 2, nil)
	if err != nil {
		return err
	}
	body := map[string]string{}
	if len(pos) == 2 {
		body["hash"] = pos[1]
	}
	var info struct {
		Name string `json:"name"`
		Hash string `json:"hash"`
	}
	if _, err := c.do(ctx, env, "POST", "/v1/plugins/"+url.PathEscape(pos[0])+"/rollback", body, &info); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "rolled back %s to %s\n", info.Name, info.Hash)
	return nil
}

// pluginVersionsCmd is "plugin versions NAME": the version of a plugin a
// running serve serves, and those it replaced, newest first.
func pluginVersionsCmd(ctx context.Context, args []string, env Env) error {
	c, pos, err := serveCommand("plugin versions", "NAME", "List the version of plugin NAME a running serve serves, its canary if it\n"+
		"has one, and the versions it replaced, newest first (what plugin rollback\n"+
		"loads again).", args, env, 1, 1, nil)
	if err != nil {
		return err
	}
	var info struct {
		Hash     string `json:"hash"`
		Versions []struct {
			Hash     string    `json:"hash"`
			Replaced time.Time `json:"replaced"`
		} `json:"versions"`
		Canary *struct {
			Hash            string
			Share           float64
			Calls, Failures int
		} `json:"canary"`
	}
	if _, err := c.do(ctx, env, "GET", "/v1/plugins/"+url.PathEscape(pos[0]), nil, &info); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HASH\tSTATE")
	fmt.Fprintf(tw, "%s\tserving\n", info.Hash)
	if c := info.Canary; c != nil {
		fmt.Fprintf(tw, "%s\tcanary: %g of the sessions, %d calls, %d failed\n", c.Hash, c.Share, c.Calls, c.Failures)
	}
	for _, v := range info.Versions {
		fmt.Fprintf(tw, "%s\treplaced %s\n", v.Hash, v.Replaced.Format(time.RFC3339))
	}
	return tw.Flush()
}

// pluginCanaryCmd is "plugin canary NAME FILE.wasm" (start a canary on a
// running serve: PUT /v1/plugins/{name}/canary), "plugin canary promote
// NAME" and "plugin canary rollback NAME".
func pluginCanaryCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin canary", env)
	var c serveClient
	c.register(fs, env)
	share := fs.Float64("share", 0, "the share of sessions the canary serves, above 0 and at most 1 (default 0.1)")
	promoteAfter := fs.Int("promote-after", 0, "promote it once `N` of its calls did not fail as a module (0: by a person only)")
	rollbackAfter := fs.Int("rollback-after", 0, "roll it back once `N` of its calls failed as a module (default 1; -1: never by itself)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage:\n"+
			"  agentic-host plugin canary [flags] NAME FILE.wasm   start FILE.wasm (signed by FILE.wasm.minisig,\n"+
			"                                                      when there) as plugin NAME's canary\n"+
			"  agentic-host plugin canary promote [flags] NAME     make the canary the version serving\n"+
			"  agentic-host plugin canary rollback [flags] NAME    roll the canary back\n\n"+
			"A canary serves the tool and policy calls of a share of the sessions\n"+
			"(each session always the same version) beside the version serving, on\n"+
			"the serve that takes the request. It promotes or rolls back by itself\n"+
			"after --promote-after calls or --rollback-after failures (a trap, a\n"+
			"timeout, out of memory or fuel). plugin versions NAME shows it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	verb := ""
	if len(args) > 0 && (args[0] == "promote" || args[0] == "rollback") {
		verb, args = args[0], args[1:]
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var info struct {
		Name, Hash string
		Share      float64
	}
	switch {
	case verb == "" && len(pos) == 2:
		wasm, err := os.ReadFile(pos[1])
		if err != nil {
			return fail(1, "%v", err)
		}
		q := url.Values{}
		if *share != 0 {
			q.Set("share", strconv.FormatFloat(*share, 'g', -1, 64))
		}
		if *promoteAfter != 0 {
			q.Set("promote_after", strconv.Itoa(*promoteAfter))
		}
		if *rollbackAfter != 0 {
			q.Set("rollback_after", strconv.Itoa(*rollbackAfter))
		}
		path := "/v1/plugins/" + url.PathEscape(pos[0]) + "/canary"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		// Its signature goes with it, when FILE.wasm.minisig is there.
		sig, err := os.ReadFile(pos[1] + plugins.SignatureSuffix)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(1, "%v", err)
		}
		if sig == nil {
			_, err = c.do(ctx, env, "PUT", path, wasm, &info)
		} else {
			body, contentType := moduleUpload(pos[0], wasm, sig)
			_, err = c.send(ctx, env, "PUT", path, contentType, body, &info)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "canary %s of %s serves %g of the sessions\n", info.Hash, info.Name, info.Share)
	case verb == "promote" && len(pos) == 1:
		if _, err := c.do(ctx, env, "POST", "/v1/plugins/"+url.PathEscape(pos[0])+"/canary/promote", nil, &info); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "promoted %s: %s serves\n", info.Name, info.Hash)
	case verb == "rollback" && len(pos) == 1:
		if _, err := c.do(ctx, env, "DELETE", "/v1/plugins/"+url.PathEscape(pos[0])+"/canary", nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "rolled back the canary of %s\n", pos[0])
	default:
		fs.Usage()
		return fail(2, "want NAME FILE.wasm, promote NAME or rollback NAME")
	}
	return nil
}
