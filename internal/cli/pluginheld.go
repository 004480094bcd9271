package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
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

// do sends one request and decodes a 2xx answer into out; anything else
// is an error with the server's message.
func (c *serveClient) do(ctx context.Context, env Env, method, path string, body any, out any) (int, error) {
	key := env.Getenv(c.keyEnv)
	if key == "" {
		return 0, fail(2, "$%s is not set: it must hold the tenant's API key", c.keyEnv)
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.url, "/")+path, rd)
	if err != nil {
		return 0, fail(2, "--server %s: %v", c.url, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fail(1, "%v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if res.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return res.StatusCode, fail(1, "%s %s: %d: %s", method, path, res.StatusCode, msg)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return res.StatusCode, fail(1, "%s %s: %v", method, path, err)
		}
	}
	return res.StatusCode, nil
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
	fs := newFlags("plugin held", env)
	var c serveClient
	c.register(fs, env)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin held [flags]\n\n"+
			"List the plugin versions a running serve holds for the tenant because\n"+
			"they widen what the version serving offers, with each widening.\n"+
			"Decide one with agentic-host plugin approve|discard NAME HASH.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return fail(2, "plugin held takes no arguments")
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
	fs := newFlags("plugin "+verb, env)
	var c serveClient
	c.register(fs, env)
	fs.Usage = func() {
		what := "Load the held version HASH of plugin NAME in the place of the version\nserving"
		if !approve {
			what = "Drop the held version HASH of plugin NAME; the version serving goes on"
		}
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin %s [flags] NAME HASH\n\n%s\n(see agentic-host plugin held).\n\nFlags:\n", verb, what)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return fail(2, "want NAME HASH")
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
