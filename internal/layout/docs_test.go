package layout_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// docs are the pages a reader is sent to: the README, docs/ and the
// examples' and kits' READMEs. (The changelog is history: it names tests
// as they were.)
func docs(t *testing.T) []string {
	t.Helper()
	pages := []string{filepath.Join(root, "README.md")}
	for _, glob := range []string{"docs/*.md", "examples/*/README.md", "examples/plugins/*/README.md", "pdk/README.md", "pdk/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	return pages
}

var (
	citedTest = regexp.MustCompile("`((?:Test|Benchmark|Fuzz|Example)[A-Z][A-Za-z0-9_]*)")
	funcDecl  = regexp.MustCompile(`^func ((?:Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*)\(`)
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// TestDocsCiteTestsThatExist: every test, benchmark, fuzzer or example a
// page names in code (`TestX`, `BenchmarkY/case`) is a function of the
// repository's tests — a page that cites a test that does not exist
// promises what nothing checks.
func TestDocsCiteTestsThatExist(t *testing.T) {
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			if m := funcDecl.FindStringSubmatch(s.Text()); m != nil {
				defined[m[1]] = true
			}
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 100 {
		t.Fatalf("found %d test functions: the walk is broken", len(defined))
	}
	for _, page := range docs(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range citedTest.FindAllStringSubmatch(string(b), -1) {
			if !defined[m[1]] {
				rel, _ := filepath.Rel(root, page)
				t.Errorf("%s cites %s, which no test file defines", rel, m[1])
			}
		}
	}
}

// TestDocsLinksResolve: every relative link of a page names a file that
// exists, and its #anchor a heading of that file (GitHub's slugs).
func TestDocsLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		b, _ := os.ReadFile(path)
		inCode := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				inCode = !inCode
			}
			if inCode || !strings.HasPrefix(line, "#") {
				continue
			}
			slug := slugOf(strings.TrimLeft(line, "#"))
			for n := 0; ; n++ { // repeated headings: slug, slug-1, …
				s := slug
				if n > 0 {
					s += "-" + string(rune('0'+n))
				}
				if !a[s] {
					a[s] = true
					break
				}
			}
		}
		anchors[path] = a
		return a
	}
	for _, page := range docs(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", rel, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s links to %s: no such heading", rel, target)
			}
		}
	}
}

// slugOf is GitHub's anchor of a heading: lower case, spaces to hyphens,
// punctuation other than hyphens and underscores dropped.
func slugOf(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '…' && r != '—' && r != '’':
			b.WriteRune(r)
		}
	}
	return b.String()
}
