package cli

import (
	"fmt"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentichost/agentic/ledger"
)

// maxAttachment bounds a file --attach sends: above it, providers refuse
// the request anyway, and the ledger would carry it in every replay.
const maxAttachment = 20 << 20

// readAttachment reads a file into a message part: an image or audio part
// by its media type, a file part (PDF, text…) otherwise. The type comes
// from the file's extension, else from its first bytes.
func readAttachment(path string) (ledger.Part, error) {
	st, err := os.Stat(path)
	if err != nil {
		return ledger.Part{}, fmt.Errorf("--attach %s: %v", path, err)
	}
	if st.IsDir() {
		return ledger.Part{}, fmt.Errorf("--attach %s: a directory, not a file", path)
	}
	if st.Size() > maxAttachment {
		return ledger.Part{}, fmt.Errorf("--attach %s: %d bytes, above the %d a message may carry", path, st.Size(), maxAttachment)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ledger.Part{}, fmt.Errorf("--attach %s: %v", path, err)
	}
	typ := mime.TypeByExtension(strings.ToLower(filepath.Ext(path)))
	if typ == "" {
		typ = http.DetectContentType(data)
	}
	typ, _, _ = strings.Cut(typ, ";")
	p := ledger.Part{MIME: typ, Data: data, Name: filepath.Base(path)}
	switch {
	case strings.HasPrefix(typ, "image/"):
		p.Type, p.Name = ledger.PartImage, ""
	case strings.HasPrefix(typ, "audio/"):
		p.Type, p.Name = ledger.PartAudio, ""
	default:
		p.Type = ledger.PartFile
	}
	return p, nil
}
