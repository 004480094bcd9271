package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// Signed plugins: "plugin verify" checks a module's minisign signature
// (FILE.wasm.minisig) with trusted keys, as a serve whose tenant has
// sandbox.trusted_keys does; "plugin upload" sends a module, with its
// signature, to a running serve (PUT /v1/plugins/{name}, multipart).

// trustFlags are the trusted keys of describe, call and verify.
type trustFlags struct {
	keys, files pluginList
}

func (f *trustFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.keys, "trusted-key", "require a signature (FILE.wasm.minisig) by the minisign public `KEY` (\"RWQ…\", the second line of minisign.pub; repeatable)")
	fs.Var(&f.files, "trusted-key-file", "require a signature by the key of the minisign.pub `FILE` (repeatable)")
}

// keyring returns the trusted keys; nil when none are given.
func (f *trustFlags) keyring() (*plugins.Keyring, error) {
	if len(f.keys)+len(f.files) == 0 {
		return nil, nil
	}
	ring, err := plugins.ParseKeyring(f.keys...)
	if err != nil {
		return nil, err
	}
	files, err := plugins.ReadKeyring(f.files...)
	if err != nil {
		return nil, err
	}
	return ring.With(files), nil
}

const verifyUsage = `Usage: agentic-host plugin verify --trusted-key KEY|--trusted-key-file FILE [flags] FILE.wasm [SIGNATURE]

Check the module's minisign signature (SIGNATURE, else FILE.wasm.minisig)
with the trusted keys, as a serve whose tenant lists them in
sandbox.trusted_keys does before it compiles the module, and print who
signed it: the key's id and the trusted comment. It exits 1 when the
module is unsigned, or its signature malformed, by another key, or of
other bytes. Sign a module with minisign -Sm FILE.wasm (-t "COMMENT" for
the trusted comment).

Flags:
`

// pluginVerifyCmd is "plugin verify".
func pluginVerifyCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin verify", env)
	var tf trustFlags
	tf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), verifyUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return fail(2, "want FILE.wasm [SIGNATURE]")
	}
	ring, err := tf.keyring()
	if err != nil {
		return fail(2, "%v", err)
	}
	if ring == nil {
		fs.Usage()
		return fail(2, "want --trusted-key or --trusted-key-file: the keys to verify with")
	}
	wasm, err := os.ReadFile(pos[0])
	if err != nil {
		return fail(1, "%v", err)
	}
	sigPath := pos[0] + plugins.SignatureSuffix
	if len(pos) == 2 {
		sigPath = pos[1]
	}
	sig, err := os.ReadFile(sigPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(1, "%v", err)
	}
	signer, err := ring.Verify(wasm, sig)
	if err != nil {
		return fail(1, "%s: %v", pos[0], err)
	}
	return pluginPrintJSON(env, struct {
		Module    string         `json:"module"`
		Hash      string         `json:"hash"`
		Signature plugins.Signer `json:"signature"`
	}{filepath.Base(pos[0]), fileHash(wasm), signer})
}

const uploadUsage = `Usage: agentic-host plugin upload [flags] FILE.wasm [NAME]

Upload the module to a running serve as plugin NAME (default: the file's
name without .wasm), with its minisign signature (--signature, else
FILE.wasm.minisig when there is one), through PUT /v1/plugins/{name}. It
prints the module as the serve lists it; a version that widens what the
plugin offers is held (exit 0, what it widens printed; plugin approve
loads it). A refusal (unsigned where the tenant requires a signature, a
module that does not load, a name another module offers) exits 1 with the
serve's reason.

Flags:
`

// fileHash is a module's content hash, as the host names it.
func fileHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pluginUploadCmd is "plugin upload".
func pluginUploadCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin upload", env)
	var c serveClient
	c.register(fs, env)
	sigFile := fs.String("signature", "", "the minisign signature `FILE` (default FILE.wasm.minisig, when it exists)")
	unsigned := fs.Bool("unsigned", false, "send no signature, even where FILE.wasm.minisig exists")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), uploadUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return fail(2, "want FILE.wasm [NAME]")
	}
	name := strings.TrimSuffix(filepath.Base(pos[0]), ".wasm")
	if len(pos) == 2 {
		name = pos[1]
	}
	wasm, err := os.ReadFile(pos[0])
	if err != nil {
		return fail(1, "%v", err)
	}
	var sig []byte
	switch {
	case *unsigned && *sigFile != "":
		return fail(2, "--unsigned and --signature exclude each other")
	case *unsigned:
	case *sigFile != "":
		if sig, err = os.ReadFile(*sigFile); err != nil {
			return fail(1, "%v", err)
		}
	default:
		sig, err = os.ReadFile(pos[0] + plugins.SignatureSuffix)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(1, "%v", err)
		}
	}
	body, contentType := moduleUpload(name, wasm, sig)
	var out struct {
		Name      string          `json:"name"`
		Hash      string          `json:"hash"`
		Signature *plugins.Signer `json:"signature"`
		Held      *heldVersion    `json:"held"`
	}
	code, err := c.send(ctx, env, "PUT", "/v1/plugins/"+url.PathEscape(name), contentType, body, &out)
	if err != nil {
		return err
	}
	if code == http.StatusAccepted && out.Held != nil {
		fmt.Fprintf(env.Stdout, "held %s %s: it widens what the version serving (%s) offers:\n", name, out.Held.Hash, out.Held.Previous)
		for _, w := range out.Held.Widenings {
			fmt.Fprintf(env.Stdout, "  %s %s: %s\n", w.Kind, w.Name, w.Change)
		}
		fmt.Fprintf(env.Stdout, "agentic-host plugin approve %s %s loads it\n", name, out.Held.Hash)
		return nil
	}
	signed := "unsigned"
	if s := out.Signature; s != nil {
		signed = fmt.Sprintf("signed by key %s (%q)", s.KeyID, s.TrustedComment)
	}
	fmt.Fprintf(env.Stdout, "uploaded %s %s, %s\n", out.Name, out.Hash, signed)
	return nil
}

// send sends one request with a body of contentType ("": none) and decodes
// a 2xx answer into out; anything else is an error with the server's
// message.
func (c *serveClient) send(ctx context.Context, env Env, method, path, contentType string, body io.Reader, out any) (int, error) {
	key := env.Getenv(c.keyEnv)
	if key == "" {
		return 0, fail(2, "$%s is not set: it must hold the tenant's API key", c.keyEnv)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.url, "/")+path, body)
	if err != nil {
		return 0, fail(2, "--server %s: %v", c.url, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
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

// moduleUpload is the multipart body of a module's upload, with its
// signature when sig is not nil, and its content type.
func moduleUpload(name string, wasm, sig []byte) (*bytes.Buffer, string) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, _ := mw.CreateFormFile("module", name+".wasm")
	part.Write(wasm)
	if sig != nil {
		part, _ = mw.CreateFormFile("signature", name+".wasm"+plugins.SignatureSuffix)
		part.Write(sig)
	}
	mw.Close()
	return &body, mw.FormDataContentType()
}
