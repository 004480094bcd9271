package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/pluginbuild"
	"github.com/agentichost/agentic/pdk"
)

// The languages "plugin new" writes projects in.
var pluginLangs = []string{"go", "ts", "assemblyscript", "c", "rust"}

// pluginNewCmd implements "agentic-host plugin new NAME --lang L [DIR]": a
// ready project — source with one tool, the kit, a build file, a README
// and a test input — that builds outside this repository with nothing
// but the language's toolchain and its package registry.
func pluginNewCmd(_ context.Context, args []string, env Env) error {
	fs := newFlags("plugin new", env)
	lang := fs.String("lang", "go", "the plugin's `LANGUAGE`: "+strings.Join(pluginLangs, ", "))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin new [--lang go|ts|assemblyscript|c|rust] NAME [DIR]\n\n"+
			"Write a plugin project in DIR (default ./NAME): one tool NAME, the kit of\n"+
			"its language, a Makefile, a README and input.json. Then:\n\n"+
			"  agentic-host plugin build DIR\n"+
			"  agentic-host plugin call DIR/NAME.wasm NAME \"$(cat DIR/input.json)\"\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return fail(2, "want NAME [DIR]")
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	name := pos[0]
	if !host.ValidToolName(name) || strings.Contains(name, "-") {
		return fail(2, "NAME %q: want 1 to 64 characters of [A-Za-z0-9_] (it names the tool, the module and the file)", name)
	}
	dir := name
	if len(pos) == 2 {
		dir = pos[1]
	}
	files, err := pluginProject(*lang, name)
	if err != nil {
		return fail(2, "%v", err)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fail(1, "%s is not empty: plugin new writes a project into a new or empty directory", dir)
	}
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fail(1, "%v", err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return fail(1, "%v", err)
		}
	}
	fmt.Fprintf(env.Stdout, "wrote a %s plugin project in %s; next:\n  agentic-host plugin build %s\n  agentic-host plugin call %s %s \"$(cat %s)\"\n",
		*lang, dir, dir, filepath.Join(dir, name+".wasm"), name, filepath.Join(dir, "input.json"))
	return nil
}

// pluginProject returns the files of a new project, by path relative to
// its directory.
func pluginProject(lang, name string) (map[string][]byte, error) {
	kit := func(src string) []byte {
		b, err := fs.ReadFile(pdk.Kits, src)
		if err != nil {
			panic(err) // the kit is embedded in this binary
		}
		return b
	}
	data := struct{ Name, Vars, Build string }{Name: name}
	files := map[string][]byte{"input.json": []byte(`{"name": "Ada"}` + "\n"), ".gitignore": []byte("*.wasm\nnode_modules/\n")}
	var tmpl map[string]string
	switch lang {
	case "go":
		data.Build = "GOOS=wasip1 GOARCH=wasm GOWORK=off go build -buildmode=c-shared -trimpath -o " + name + ".wasm ."
		tmpl = map[string]string{"main.go": goMain, "go.mod": goMod}
		files["go.sum"] = kit("go.sum")
		for _, f := range []string{"doc.go", "host.go", "native.go", "pdk.go", "wasm.go", "go.mod", "go.sum"} {
			files["pdk/"+f] = kit(f)
		}
	case "assemblyscript":
		data.Build = "npm install && npx asc " + name + ".ts --outFile " + name + ".wasm -O3 --noAssert --path node_modules --use abort=agenticAbort"
		tmpl = map[string]string{name + ".ts": asMain}
		files["agentic/index.ts"] = kit("assemblyscript/index.ts")
		pkg, err := npmPackage(kit("assemblyscript/package.json"), name, "asc "+name+".ts --outFile "+name+".wasm -O3 --noAssert --path node_modules --use abort=agenticAbort", nil)
		if err != nil {
			return nil, err
		}
		files["package.json"] = pkg
	case "ts":
		data.Build = "npm install && node build.mjs " + name + ".ts " + name + ".wasm"
		tmpl = map[string]string{name + ".ts": tsMain}
		files["agentic.ts"] = kit("ts/agentic.ts")
		files["build.mjs"] = kit("ts/build.mjs")
		files["tsconfig.json"] = []byte(tsConfig)
		pkg, err := npmPackage(kit("ts/package.json"), name, "node build.mjs "+name+".ts "+name+".wasm", map[string]any{"type": "module"})
		if err != nil {
			return nil, err
		}
		files["package.json"] = pkg
	case "c":
		data.Build = "clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor -nodefaultlibs -I . -o " + name + ".wasm " + name + ".c agentic.c -lc"
		tmpl = map[string]string{name + ".c": cMain}
		files["agentic.h"] = kit("c/agentic.h")
		files["agentic.c"] = kit("c/agentic.c")
	case "rust":
		// rustc alone, no cargo: the kit is the module agentic.rs beside
		// the crate root. The Makefile picks the rustc and the target as
		// plugin build does (pluginbuild.Rustc, RustToolchain).
		data.Vars = "# Debian's rustc unless RUSTC says otherwise; the wasm32 WASI target its\n" +
			"# standard library has (Debian: wasm32-wasi; rustup: wasm32-wasip1).\n" +
			"RUSTC ?= $(shell test -x /usr/bin/rustc && echo /usr/bin/rustc || echo rustc)\n" +
			"RUST_TARGET ?= $(shell test -d \"$$($(RUSTC) --print sysroot)/lib/rustlib/wasm32-wasip1\" && echo wasm32-wasip1 || echo wasm32-wasi)\n\n"
		data.Build = "$(RUSTC) --target $(RUST_TARGET) " + strings.Join(pluginbuild.RustFlags, " ") + " -o " + name + ".wasm " + name + ".rs"
		tmpl = map[string]string{name + ".rs": rustMain}
		files["agentic.rs"] = kit("rust/agentic.rs")
	default:
		return nil, fmt.Errorf("--lang %q: want one of %s", lang, strings.Join(pluginLangs, ", "))
	}
	tmpl["Makefile"] = makefile
	tmpl["README.md"] = readme
	for rel, text := range tmpl {
		var b bytes.Buffer
		if err := template.Must(template.New(rel).Parse(text)).Execute(&b, data); err != nil {
			return nil, err
		}
		files[rel] = b.Bytes()
	}
	return files, nil
}

// npmPackage is a project's package.json: named name, its build script
// build, the kit's (kitJSON's) dependencies at the kit's versions, and the
// fields of extra.
func npmPackage(kitJSON []byte, name, build string, extra map[string]any) ([]byte, error) {
	var kitPkg struct {
		Dependencies    map[string]string `json:"dependencies"`
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(kitJSON, &kitPkg); err != nil {
		return nil, err
	}
	pkg := map[string]any{
		"name": name, "version": "0.1.0", "private": true,
		"scripts":         map[string]string{"build": build},
		"dependencies":    kitPkg.Dependencies,
		"devDependencies": kitPkg.DevDependencies,
	}
	for k, v := range extra {
		pkg[k] = v
	}
	b, err := json.MarshalIndent(pkg, "", "  ")
	return append(b, '\n'), err
}

// pluginBuildCmd implements "agentic-host plugin build DIR": it recognises
// the project's language and builds DIR/NAME.wasm with the flags the host
// needs (a Go library, not a command; an AssemblyScript module with the
// kit's abort handler; a C reactor; a Rust cdylib).
func pluginBuildCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin build", env)
	out := fs.String("o", "", "write the module to `FILE` (default DIR/NAME.wasm)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin build [-o FILE] [DIR]\n\n"+
			"Build the plugin project in DIR (default .): a Go module (go.mod), a\n"+
			"TypeScript or AssemblyScript project (package.json; npm install runs\n"+
			"first when node_modules is missing), C sources, or a Rust crate\n"+
			"(NAME.rs with mod agentic; built by $RUSTC, else /usr/bin/rustc, else\n"+
			"rustc), into DIR/NAME.wasm.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return fail(2, "want at most one DIR")
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return fail(2, "%v", err)
	}
	lang, name, err := pluginProjectOf(dir)
	if err != nil {
		return fail(2, "%v", err)
	}
	target := *out
	if target == "" {
		target = filepath.Join(dir, name+".wasm")
	}
	if target, err = filepath.Abs(target); err != nil {
		return fail(2, "%v", err)
	}
	var cmds []*exec.Cmd
	switch lang {
	case "go":
		cmds = append(cmds, pluginbuild.GoCommand(ctx, dir, target))
	case "ts":
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "quickjs-wasi")); err != nil {
			npm := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund")
			npm.Dir = dir
			cmds = append(cmds, npm)
		}
		cmds = append(cmds, pluginbuild.TypeScriptCommand(ctx, dir, dir, name+".ts", target))
	case "assemblyscript":
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "assemblyscript")); err != nil {
			npm := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund")
			npm.Dir = dir
			cmds = append(cmds, npm)
		}
		cmds = append(cmds, pluginbuild.AssemblyScriptCommand(ctx, dir, dir, name+".ts", target, []string{"-O3", "--noAssert", "--use", "abort=agenticAbort"}))
	case "c":
		sysroot, err := pluginbuild.WASISysroot()
		if err != nil {
			return fail(1, "%v", err)
		}
		sources, _ := filepath.Glob(filepath.Join(dir, "*.c"))
		cmds = append(cmds, pluginbuild.CCommand(ctx, dir, sysroot, target, sources, []string{dir}, nil))
	case "rust":
		rustc := pluginbuild.Rustc()
		rustTarget, err := pluginbuild.RustToolchain(ctx, rustc)
		if err != nil {
			return fail(1, "%v", err)
		}
		cmds = append(cmds, pluginbuild.RustCommand(ctx, dir, rustc, rustTarget, name+".rs", target, nil))
	}
	for _, cmd := range cmds {
		cmd.Stdout, cmd.Stderr = env.Stderr, env.Stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.Error
			if errors.As(err, &ee) {
				return fail(1, "%s is not installed: %v (see docs/plugins.md, \"The kits\")", ee.Name, err)
			}
			return fail(1, "%s: %v", strings.Join(cmd.Args, " "), err)
		}
	}
	fmt.Fprintln(env.Stdout, target)
	return nil
}

// pluginProjectOf recognises a project: its language, and its name (the
// Go module's last path element, the package.json name, the C source
// beside the kit's agentic.c, or the Rust source that declares the kit's
// module, mod agentic).
func pluginProjectOf(dir string) (lang, name string, err error) {
	if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if mod, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
				return "go", path.Base(strings.Trim(strings.TrimSpace(mod), `"`)), nil
			}
		}
		return "", "", fmt.Errorf("%s/go.mod names no module", dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil {
		var pkg struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(b, &pkg); err != nil || pkg.Name == "" {
			return "", "", fmt.Errorf("%s/package.json names no package", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, pkg.Name+".ts")); err != nil {
			return "", "", fmt.Errorf("%s has no %s.ts, the entry its package.json name implies", dir, pkg.Name)
		}
		if _, err := os.Stat(filepath.Join(dir, "build.mjs")); err == nil {
			return "ts", pkg.Name, nil // the TypeScript kit's build
		}
		return "assemblyscript", pkg.Name, nil
	}
	sources, _ := filepath.Glob(filepath.Join(dir, "*.c"))
	var own []string
	for _, s := range sources {
		if filepath.Base(s) != "agentic.c" {
			own = append(own, s)
		}
	}
	if len(own) == 1 {
		return "c", strings.TrimSuffix(filepath.Base(own[0]), ".c"), nil
	}
	rs, _ := filepath.Glob(filepath.Join(dir, "*.rs"))
	var roots []string
	for _, s := range rs {
		if b, err := os.ReadFile(s); err == nil && filepath.Base(s) != "agentic.rs" && rustModAgentic.Match(b) {
			roots = append(roots, s)
		}
	}
	if len(roots) == 1 {
		return "rust", strings.TrimSuffix(filepath.Base(roots[0]), ".rs"), nil
	}
	return "", "", fmt.Errorf("%s is not a plugin project: no go.mod, no package.json, not one C source beside agentic.c, not one Rust source declaring mod agentic", dir)
}

const goMod = `module {{.Name}}

go 1.24.0

require github.com/agentichost/agentic/pdk v0.0.0-00010101000000-000000000000

require github.com/extism/go-pdk v1.1.3 // indirect

// The kit is in ./pdk, so that the project builds with nothing but the Go
// module proxy (for github.com/extism/go-pdk).
replace github.com/agentichost/agentic/pdk => ./pdk
`

const goMain = `// Command {{.Name}} is an agentic-host plugin: one tool, {{.Name}}.
//
// Build: agentic-host plugin build .   (or: make)
package main

import (
	"fmt"

	"github.com/agentichost/agentic/pdk"
)

type input struct {
	Name string ` + "`json:\"name\"`" + `
}

func init() {
	pdk.RegisterTool(pdk.Tool{
		Name:        "{{.Name}}",
		Description: "Greet someone by name.",
		Effect:      pdk.Read,
		InputSchema: ` + "`" + `{"type":"object","properties":{"name":{"type":"string","description":"Who to greet."}},"required":["name"]}` + "`" + `,
	}, func(c pdk.Call, in input) (string, error) {
		return fmt.Sprintf("Hello, %s!", in.Name), nil
	})
}

func main() {}
`

const asMain = `// {{.Name}} is an agentic-host plugin in AssemblyScript: one tool, {{.Name}}.
//
// Build: agentic-host plugin build .   (or: make)

import { registerTool, Call, Output } from "./agentic/index";
export { describe, call, validate, decide } from "./agentic/index";

function greet(c: Call): Output {
  const name = c.input.getString("name");
  if (name == null) return Output.error("name (a string) is required");
  return Output.text("Hello, " + name! + "!");
}

registerTool(
  "{{.Name}}",
  "Greet someone by name.",
  '{"type":"object","properties":{"name":{"type":"string","description":"Who to greet."}},"required":["name"]}',
  "read",
  true,
  0,
  greet,
);
`

const tsMain = `// {{.Name}} is an agentic-host plugin in TypeScript: one tool, {{.Name}}.
//
// Build: agentic-host plugin build .   (or: npm run build)

import { tool } from "./agentic";

tool<{ name: string }>({
  name: "{{.Name}}",
  description: "Greet someone by name.",
  inputSchema: {
    type: "object",
    properties: { name: { type: "string", description: "Who to greet." } },
    required: ["name"],
  },
  effect: "read",
  idempotent: true,
  execute: ({ name }) => ` + "`Hello, ${name}!`" + `,
});
`

// tsConfig checks a TypeScript plugin for the engine it runs in: ES2023,
// no DOM, no Node.
const tsConfig = `{
  "compilerOptions": {
    "target": "es2023",
    "lib": ["es2023"],
    "module": "esnext",
    "moduleResolution": "bundler",
    "strict": true,
    "noEmit": true,
    "skipLibCheck": true,
    "types": []
  },
  "include": ["*.ts"]
}
`

const cMain = `/*
 * {{.Name}}.c — an agentic-host plugin in C: one tool, {{.Name}}.
 *
 * Build: agentic-host plugin build .   (or: make)
 */
#include "agentic.h"

#include <stdlib.h>

static int greet(const agentic_call *c, agentic_buf *out) {
    char *name = agentic_json_get_string(c->input, "name");
    if (name == NULL) {
        agentic_buf_puts(out, "name (a string) is required");
        return AGENTIC_ERROR;
    }
    agentic_buf msg = {0};
    agentic_buf_puts(&msg, "Hello, ");
    agentic_buf_puts(&msg, name);
    agentic_buf_puts(&msg, "!");
    agentic_buf_json_string(out, msg.ptr, msg.len); /* the output is JSON: a string */
    agentic_buf_free(&msg);
    free(name);
    return AGENTIC_OK;
}

static const agentic_tool tools[] = {
    {.name = "{{.Name}}",
     .description = "Greet someone by name.",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"description\":\"Who to greet.\"}},\"required\":[\"name\"]}",
     .effect = "read",
     .idempotent = true,
     .handler = greet},
};

AGENTIC_PLUGIN(tools, AGENTIC_COUNT(tools), NULL, 0, NULL, 0);
`

// rustModAgentic finds the declaration of the Rust kit's module.
var rustModAgentic = regexp.MustCompile(`(?m)^\s*(pub(\([a-z]+\))?\s+)?mod\s+agentic\s*;`)

const rustMain = `//! {{.Name}}.rs — an agentic-host plugin in Rust: one tool, {{.Name}}.
//!
//! Build: agentic-host plugin build .   (or: make)

mod agentic;

use agentic::{Call, Effect, Error, Plugin, Tool, Value};

/// The plugin's items; the kit's exports (describe, call, validate,
/// decide) call it.
pub fn plugin() -> Plugin {
    Plugin::new().tool(
        Tool::new("{{.Name}}", "Greet someone by name.", Effect::Read)
            .input_schema(
                r#"{"type":"object","properties":{"name":{"type":"string","description":"Who to greet."}},"required":["name"]}"#,
            )
            .idempotent(true),
        greet,
    )
}

fn greet(c: &Call) -> Result<Value, Error> {
    let name = c.input["name"].as_str().ok_or("name (a string) is required")?;
    Ok(Value::from(format!("Hello, {}!", name))) // a string reaches the model as text
}
`

const makefile = `# Build the plugin (or: agentic-host plugin build .).
{{.Vars}}{{.Name}}.wasm:
	{{.Build}}

.PHONY: {{.Name}}.wasm
`

const readme = "# {{.Name}}\n\n" +
	"An agentic-host plugin with one tool, `{{.Name}}`, which greets someone.\n\n" +
	"Build it (the command is in the Makefile too):\n\n" +
	"    agentic-host plugin build .\n\n" +
	"Call it as the host would, in the same sandbox:\n\n" +
	"    agentic-host plugin call {{.Name}}.wasm {{.Name}} \"$(cat input.json)\"\n\n" +
	"Offer it to an agent: put `{{.Name}}.wasm` in a directory and run\n" +
	"`agentic-host chat --plugins DIR`; the host reloads it when the file\n" +
	"changes. docs/plugins.md of agentic-host is the author's guide (the ABI,\n" +
	"effects, the sandbox, the key-value store, HTTP).\n"
