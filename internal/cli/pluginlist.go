package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agentichost/agentic/plugins"
)

// pluginListCmd implements "agentic-host plugin list": it loads a plugin
// directory the way chat --plugins does and reports what is served, what
// is withheld for a name conflict, and what was refused, with why. It exits
// 1 when anything was refused or is in conflict, so that a deployment
// script can check a directory before a host loads it.
func pluginListCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin list", env)
	var f pluginFlags
	f.register(fs, env)
	setLogLevelDefault(fs, "error") // the table tells what the log would
	dir := fs.String("plugins", "", "the plugin `DIR` (NAME.wasm, with NAME.json for plain Extism modules)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin list [flags] --plugins DIR\n\n"+
			"Load the modules of DIR as chat --plugins does, within the sandbox the\n"+
			"flags describe, and list them: each module's hash and what it offers;\n"+
			"names two modules offer, which neither serves until one is removed;\n"+
			"modules refused, with why. Exits 1 when anything is refused or in\n"+
			"conflict.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *dir == "" && len(pos) == 1 {
		*dir, pos = pos[0], nil
	}
	if *dir == "" || len(pos) != 0 {
		fs.Usage()
		return fail(2, "want --plugins DIR")
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fail(2, "--plugins %s: not a directory", *dir)
	}
	limits, err := f.limits()
	if err != nil {
		return fail(2, "%v", err)
	}
	if f.verbose {
		fs.Set("log-level", "info")
	}
	logger, err := newLogger(fs, env)
	if err != nil {
		return err
	}
	rt, err := plugins.NewRuntime(plugins.Options{CacheDir: f.cacheDir, Logger: logger})
	if err != nil {
		return fail(1, "%v", err)
	}
	defer rt.Close(context.Background())
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return limits }})
	defer reg.Close(context.Background())
	w, err := reg.Watch(ctx, f.tenant, *dir, plugins.WatchOptions{})
	if err != nil {
		return fail(1, "--plugins %s: %v", *dir, err)
	}
	_ = w.Close()

	list := pluginListOf(reg, f.tenant)
	if *asJSON {
		if err := pluginPrintJSON(env, list); err != nil {
			return err
		}
	} else {
		list.print(env.Stdout)
	}
	if n, c := len(list.Refusals), len(list.Conflicts); n+c > 0 {
		return fail(1, "%d refused, %d in conflict", n, c)
	}
	return nil
}

// pluginListing is what plugin list reports.
type pluginListing struct {
	Tenant    string             `json:"tenant"`
	Modules   []pluginListModule `json:"modules"`
	Conflicts []pluginConflict   `json:"conflicts"`
	Refusals  []pluginRefusal    `json:"refusals"`
}

type pluginListModule struct {
	Name       string   `json:"name"`
	Hash       string   `json:"hash"`
	Tools      []string `json:"tools"`
	Validators []string `json:"validators"`
	Policies   []string `json:"policies"`
}

type pluginConflict struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	Modules []string `json:"modules"`
}

type pluginRefusal struct {
	Name  string `json:"name"`
	Hash  string `json:"hash,omitempty"`
	Error string `json:"error"`
}

func pluginListOf(reg *plugins.Registry, tenant string) pluginListing {
	l := pluginListing{Tenant: tenant, Modules: []pluginListModule{}, Conflicts: []pluginConflict{}, Refusals: []pluginRefusal{}}
	for _, m := range reg.Modules(tenant) {
		d := m.Description()
		lm := pluginListModule{Name: m.Name(), Hash: m.Hash(), Tools: []string{}, Validators: []string{}, Policies: []string{}}
		for _, t := range d.Tools {
			lm.Tools = append(lm.Tools, t.Name)
		}
		for _, v := range d.Validators {
			lm.Validators = append(lm.Validators, v.Name)
		}
		for _, p := range d.Policies {
			lm.Policies = append(lm.Policies, p.Name)
		}
		l.Modules = append(l.Modules, lm)
	}
	for _, c := range reg.Conflicts(tenant) {
		l.Conflicts = append(l.Conflicts, pluginConflict{Kind: c.Kind, Name: c.Name, Modules: c.Modules})
	}
	for _, r := range reg.Refusals(tenant) {
		l.Refusals = append(l.Refusals, pluginRefusal{Name: r.Name, Hash: r.Hash, Error: r.Err.Error()})
	}
	return l
}

// print writes the listing as tables.
func (l pluginListing) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODULE\tHASH\tOFFERS")
	for _, m := range l.Modules {
		var offers []string
		for _, kind := range []struct {
			name  string
			items []string
		}{{"tool", m.Tools}, {"validator", m.Validators}, {"policy", m.Policies}} {
			for _, it := range kind.items {
				offers = append(offers, kind.name+" "+it)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, shortHash(m.Hash), strings.Join(offers, ", "))
	}
	tw.Flush()
	if len(l.Conflicts) > 0 {
		fmt.Fprintln(out, "\nConflicts (served by none of the modules until one is removed):")
		for _, c := range l.Conflicts {
			fmt.Fprintf(out, "  %s %s: offered by %s\n", c.Kind, c.Name, strings.Join(c.Modules, " and "))
		}
	}
	if len(l.Refusals) > 0 {
		fmt.Fprintln(out, "\nRefused:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, r := range l.Refusals {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Name, shortHash(r.Hash), r.Error)
		}
		tw.Flush()
	}
}

// shortHash is a content hash cut for a table: "sha256:" and 12 digits.
func shortHash(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12]
	}
	if h == "" {
		return "-"
	}
	return h
}
